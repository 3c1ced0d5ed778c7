// A Grid (sweep.proto) expanded into its points: every combination of the axes' values, the last axis
// varying fastest, each with its part of a run name ("lr=3e-4,batch_size=8") and its --set assignments. An
// axis over several fields (GridAxis.fields) sets them together from each comma-separated value.
// Both the grid design (sweep.grid) and the grid each IsoFLOP point carries (sweep.isoflop.point_grid) use it.
#ifndef LMFORGE_EXPERIMENTS_SWEEP_GRID_H_
#define LMFORGE_EXPERIMENTS_SWEEP_GRID_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "experiments/sweep/sweep.pb.h"

namespace lmf::sweep {

struct GridPoint {
  std::string name;                      // "lr=3e-4,batch_size=8": each axis's last path part and value
  std::vector<std::string> assignments;  // "optimizer.lr=3e-4", ...
};

// Why the sweep may not have an axis over `field` (it sets that field itself), or "" where it may.
using AxisRefusal = std::function<std::string(const std::string& field)>;

// The points of `grid`. Errors start with "<source>: <where>" (where: "sweep.grid",
// "sweep.isoflop.point_grid") and name the axis: no axis, no field or both `field` and `fields`, no values,
// a value with another number of parts than the axis has fields, two axes over one field, a field `refusal`
// refuses, more than `max_points` points.
absl::StatusOr<std::vector<GridPoint>> ExpandGrid(const config::Grid& grid, const std::string& source,
                                                  const std::string& where, const AxisRefusal& refusal,
                                                  size_t max_points);

// `grid` with each value of its axis over `field` alone multiplied by `factor` and written with 4 significant
// digits ("1.6e-2" x 2.5 -> "0.04"), the other axes as they are. Fails, starting with "<source>: <where>",
// where no axis is over `field` alone, or a value, or its product, is not a positive finite number.
absl::StatusOr<config::Grid> ScaleAxis(const config::Grid& grid, const std::string& field, double factor,
                                       const std::string& source, const std::string& where);

// `base` with each point's assignments applied, in the points' order. Fails, starting with
// "<source>: <where>", on an assignment that does not apply, and on two points that give the same config
// (one value written two ways, "1e-3" and "0.001", would train one config twice and weigh it twice in the
// fits).
absl::StatusOr<std::vector<config::Experiment>> ApplyGrid(const config::Experiment& base,
                                                          const std::vector<GridPoint>& points,
                                                          const std::string& source, const std::string& where);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_GRID_H_

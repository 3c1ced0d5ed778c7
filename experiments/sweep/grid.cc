// Grid expansion (see grid.h).
#include "experiments/sweep/grid.h"

#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "config/loader.h"
#include "config/overrides.h"

namespace lmf::sweep {

absl::StatusOr<std::vector<GridPoint>> ExpandGrid(const config::Grid& grid, const std::string& source,
                                                  const std::string& where, const AxisRefusal& refusal,
                                                  size_t max_points) {
  auto error = [&](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, message));
  };
  if (grid.axis_size() == 0) return error(" has no axis; add `axis { field: ... values: ... }`");
  std::map<std::string, int> axis_of;  // field -> the first axis over it
  std::vector<std::vector<std::string>> fields(grid.axis_size());
  size_t total = 1;
  for (int i = 0; i < grid.axis_size(); ++i) {
    const auto& axis = grid.axis(i);
    if (!axis.field().empty() && axis.fields_size() > 0) {
      return error(absl::StrCat(".axis[", i, "] has both `field` and `fields`; give one"));
    }
    fields[i] = axis.field().empty() ? std::vector<std::string>(axis.fields().begin(), axis.fields().end())
                                     : std::vector<std::string>{axis.field()};
    if (fields[i].empty()) return error(absl::StrCat(".axis[", i, "].field is empty (or give `fields`)"));
    for (const std::string& field : fields[i]) {
      if (field.empty()) return error(absl::StrCat(".axis[", i, "].fields has an empty field"));
      if (const std::string why = refusal ? refusal(field) : ""; !why.empty()) {
        return error(absl::StrCat(".axis[", i, "].field is ", field, ", which the sweep sets itself (", why,
                                  "): an axis over it would change nothing"));
      }
      if (const auto [it, fresh] = axis_of.insert({field, i}); !fresh) {
        return error(absl::StrCat(".axis[", i, "] and axis[", it->second, "] are both over ", field,
                                  ": each run would take only the last axis's value; put all the values in one "
                                  "axis"));
      }
    }
    if (axis.values_size() == 0) {
      return error(absl::StrCat(".axis[", i, "] (", absl::StrJoin(fields[i], ", "), ") has no values"));
    }
    for (const std::string& value : axis.values()) {
      const size_t parts = fields[i].size() == 1 ? 1 : std::vector<std::string>(absl::StrSplit(value, ',')).size();
      if (parts != fields[i].size()) {
        return error(absl::StrCat(".axis[", i, "] value \"", value, "\" has ", parts, " comma-separated parts; its ",
                                  fields[i].size(), " fields (", absl::StrJoin(fields[i], ", "), ") need one each"));
      }
    }
    total *= static_cast<size_t>(axis.values_size());
    if (total > max_points) return error(absl::StrCat(" expands to more than ", max_points, " points"));
  }
  std::vector<GridPoint> points;
  std::vector<int> index(grid.axis_size(), 0);
  for (size_t r = 0; r < total; ++r) {
    GridPoint point;
    std::vector<std::string> parts;
    for (int i = 0; i < grid.axis_size(); ++i) {
      const std::string& value = grid.axis(i).values(index[i]);
      const std::vector<std::string> tuple =
          fields[i].size() == 1 ? std::vector<std::string>{value} : absl::StrSplit(value, ',');
      for (size_t f = 0; f < fields[i].size(); ++f) {
        const std::string& field = fields[i][f];
        point.assignments.push_back(absl::StrCat(field, "=", tuple[f]));
        const size_t dot = field.rfind('.');
        parts.push_back(absl::StrCat(dot == std::string::npos ? field : field.substr(dot + 1), "=", tuple[f]));
      }
    }
    point.name = absl::StrJoin(parts, ",");
    points.push_back(std::move(point));
    for (int i = grid.axis_size() - 1; i >= 0; --i) {  // last axis fastest
      if (++index[i] < grid.axis(i).values_size()) break;
      index[i] = 0;
    }
  }
  return points;
}

absl::StatusOr<config::Grid> ScaleAxis(const config::Grid& grid, const std::string& field, double factor,
                                       const std::string& source, const std::string& where) {
  config::Grid scaled = grid;
  for (int i = 0; i < scaled.axis_size(); ++i) {
    config::GridAxis* axis = scaled.mutable_axis(i);
    if (axis->field() != field) continue;
    for (int v = 0; v < axis->values_size(); ++v) {
      double value = 0;
      if (!absl::SimpleAtod(axis->values(v), &value) || !(value > 0) || !std::isfinite(value) ||
          !(value * factor > 0) || !std::isfinite(value * factor)) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": ", where, ".axis[", i, "] value \"", axis->values(v), "\" (", field,
                         ") times ", factor, " is not a positive finite number"));
      }
      axis->set_values(v, absl::StrFormat("%.4g", value * factor));
    }
    return scaled;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", where, " has no axis over ", field, " alone (`axis { field: \"", field,
                   "\" values: ... }`) to scale"));
}

absl::StatusOr<std::vector<config::Experiment>> ApplyGrid(const config::Experiment& base,
                                                          const std::vector<GridPoint>& points,
                                                          const std::string& source, const std::string& where) {
  std::vector<config::Experiment> out;
  std::map<std::string, std::string> point_of_config;  // the config as text -> the point that has it
  for (const GridPoint& point : points) {
    config::Experiment e = base;
    for (const std::string& a : point.assignments) {
      if (absl::Status s = config::ApplyOverride(a, &e); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, ": ", s.message()));
      }
    }
    const auto [same, fresh] = point_of_config.insert({config::ExperimentToText(e), point.name});
    if (!fresh) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", where, ": runs ", same->second, " and ", point.name,
                       " have the same config (axis values that set the same thing); drop one"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace lmf::sweep

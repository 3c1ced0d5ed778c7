// Readers for the published scaling tables in ../shared/data/scaling (see its SOURCES.md), turning each
// into Observations so the fits can be checked against the papers' own numbers. Each reader knows its
// file's columns and conventions; errors name the file, line and column.
#ifndef LMFORGE_SCALING_PUBLISHED_H_
#define LMFORGE_SCALING_PUBLISHED_H_

#include <string>

#include "absl/status/statusor.h"
#include "scaling/fit/observation.h"

namespace lmf::scaling {

// Epoch AI's reconstruction of Chinchilla (epoch_chinchilla_svg_extracted_data.csv): N = "Model Size",
// C = "Training FLOP", D = C / (6N) as Epoch derives it, loss = "loss"; no budget groups (budget 0).
absl::StatusOr<Observations> ReadEpochChinchilla(const std::string& path);

// The same minus the `count` highest-loss runs, as Besiroglu et al. do (they keep loss < the count-th
// highest loss; with count = 5 that leaves 240 of 245).
Observations DropHighestLoss(const Observations& observations, int count);

// Llama 3 IsoFLOP points (llama3_isoflops_points.csv): budget = C = compute_budget, D = training_tokens,
// N = C / (6D), loss = validation_loss.
absl::StatusOr<Observations> ReadLlama3IsoFlops(const std::string& path);

// The (Mis)Fitting open_lm sweep (misfitting_scaling_results_last_ckpt_only.csv): N = "N" (or "N_no_emb"),
// D = "D", C = "C", loss = "loss"; budget 0.
absl::StatusOr<Observations> ReadMisfitting(const std::string& path, bool non_embedding);

// A Marin scaling-ladder export (marin_202603_isoflop_*.csv): the regular "isoflop-<budget>-..." runs only
// (the "validation-optimal" runs are left out, as Open-Athena does). The budget in a run name counts the
// forward pass only (about 2ND), so budget = 3 x that; N = parameter_count, D = throughput/total_tokens,
// C = throughput/total_gflops x 1e9 (the whole training compute), loss = eval/paloma/macro_loss.
absl::StatusOr<Observations> ReadMarinIsoFlops(const std::string& path);

// One experiment of Open-Athena's combined IsoFLOP table (openathena_isoflops_combined.csv), selected by
// its `experiment` column (e.g. "epochai_chinchilla__massivetext__chinchilla"); rows flagged as outliers
// are left out unless keep_outliers. N = params, D = tokens, budget = C = budget. Fails when no row matches.
absl::StatusOr<Observations> ReadOpenAthenaIsoFlops(const std::string& path, const std::string& experiment,
                                                    bool keep_outliers);

// CS336 assignment 3's synthetic IsoFLOP curves (cs336_a3_isoflops_curves_SYNTHETIC.json, a JSON array of
// {parameters, compute_budget, final_loss}): budget = C = compute_budget, D = C / (6N).
absl::StatusOr<Observations> ReadCs336IsoFlops(const std::string& path);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_PUBLISHED_H_

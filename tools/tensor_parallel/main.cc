// mha-tensor-parallel: one attention layer sharded by heads over MPI ranks
// (Megatron-style). Each rank builds the layer of its heads from the full weights,
// runs it, and MPI_Allreduce sums the partial outputs into the full layer's output;
// each rank's KV cache holds only its KV heads. The same binary runs across machines
// under mpirun with a hostfile (docs/serving.md, "Tensor parallelism").
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mha/mha.hpp"
#include "src/io/layer_file.h"
#include "src/io/npy.h"
#include "tools/mha_run/feature_flags.h"
#include "tools/mha_run/rotary_flags.h"

namespace {

constexpr char kUsage[] =
    "usage: mpirun -np N mha-tensor-parallel [--weights W.safetensors [--prefix P]\n"
    "                                         --num-heads H [--num-kv-heads G]\n"
    "                                         --query Q.npy] [--rope ...]\n"
    "                                         [--output O.npy] [--check]\n"
    "Runs one attention layer with its heads sharded over the N ranks, summed by\n"
    "MPI_Allreduce: the query [B, S, dim] as one causal self-attention forward, and\n"
    "again as a prefill of S - 2 tokens and two decode steps through each rank's cache.\n"
    "  --weights       an nn.MultiheadAttention or q/k/v/out_proj (o_proj) state_dict,\n"
    "                  F32, BF16 or F16 (mha.save_safetensors writes one); --prefix\n"
    "                  reads one layer of a checkpoint (model.layers.0.self_attn.).\n"
    "                  Without it, a random layer of --num-heads heads (default 8),\n"
    "                  half as many KV heads, and --rope neox unless --rope is given\n"
    "  --num-heads     query heads; --num-kv-heads defaults to it (no grouping)\n"
    "  --query         float32 [B, S, dim] or [S, dim] .npy (needed with --weights)\n"
    "  --output        the forward's output, written by rank 0\n"
    "  --check         compare both runs with the unsharded layer on every rank\n"
    "rotary flags, as mha-run's (rank 0 prints the rotary the layer runs with):\n";
constexpr char kUsageEnd[] = "As root, Open MPI wants mpirun --allow-run-as-root.\n";

struct Options {
  std::string weights, query, output, prefix;
  int64_t num_heads = 8, num_kv_heads = 0;  // 0: as many as the query heads
  bool check = false, help = false;
  std::set<std::string> given;
  mha::RotaryConfig rotary;
};

// A head count: the whole text an integer in [1, 4096] (the random layer is sized
// from it).
int64_t ParseHeads(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < 1 || value > 4096) {
    throw mha::cli::UsageError(flag + ": expected an integer in [1, 4096], got '" + text +
                               "'");
  }
  return value;
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    options.given.insert(flag);
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw mha::cli::UsageError(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--weights")
      options.weights = value();
    else if (flag == "--prefix")
      options.prefix = value();
    else if (flag == "--longrope-factors")
      mha::cli::LoadLongRopeFactors(value(), options.rotary);
    else if (flag == "--query")
      options.query = value();
    else if (flag == "--output")
      options.output = value();
    else if (flag == "--num-heads")
      options.num_heads = ParseHeads(flag, value());
    else if (flag == "--num-kv-heads")
      options.num_kv_heads = ParseHeads(flag, value());
    else if (flag == "--check")
      options.check = true;
    else if (flag == "--help" || flag == "-h")
      options.help = true;
    else if (mha::cli::IsRotaryFlag(flag))
      mha::cli::ParseRotaryFlag(flag, value(), options.rotary);
    else
      throw mha::cli::UsageError("unknown flag " + flag);
  }
  if (options.help) return options;
  mha::cli::CheckRotaryFlagsApply(options.given);
  if (!options.weights.empty() && options.query.empty()) {
    throw mha::cli::UsageError("--weights needs --query (the layer's input)");
  }
  for (const char* flag : {"--query", "--prefix"}) {
    if (options.given.count(flag) && options.weights.empty()) {
      throw mha::cli::UsageError(std::string(flag) +
                                 " applies only with --weights (the random layer makes "
                                 "its own input)");
    }
  }
  return options;
}

std::vector<float> Random(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

// The full layer and query: from files, or random (the same on every rank).
struct Problem {
  mha::io::LoadedLayer layer;
  std::vector<float> owned[4];  // random weights: q, k, v, out
  std::vector<float> query;
  mha::Shape query_shape;  // [B, S, dim]
  bool unbatched = false;  // the query file was [S, dim]
};

void MakeRandom(const Options& options, Problem& problem) {
  mha::AttentionConfig& config = problem.layer.config;
  // A grouped layer unless told: half as many KV heads where the count is even.
  config.num_heads = options.num_heads;
  config.num_kv_heads = options.num_kv_heads         ? options.num_kv_heads
                        : options.num_heads % 2 == 0 ? options.num_heads / 2
                                                     : options.num_heads;
  config.head_dim = 16;
  config.query_dim = 64;
  config.rotary = options.rotary;
  if (!options.given.count("--rope"))
    config.rotary.pairing = mha::RotaryPairing::kHalfSplit;
  const int64_t rows[4] = {config.model_dim(), config.kv_dim(), config.kv_dim(), 64};
  mha::Projection* parts[4] = {&problem.layer.weights.query, &problem.layer.weights.key,
                               &problem.layer.weights.value,
                               &problem.layer.weights.output};
  for (int i = 0; i < 4; ++i) {
    const int64_t columns = i == 3 ? config.model_dim() : 64;
    problem.owned[i] = Random(rows[i] * columns, 10 + i);
    parts[i]->weight =
        mha::TensorView(problem.owned[i].data(), mha::Shape{rows[i], columns});
  }
  problem.query = Random(2 * 12 * 64, 20);
  problem.query_shape = mha::Shape{2, 12, 64};
}

Problem Load(const Options& options) {
  Problem problem;
  if (options.weights.empty()) {
    MakeRandom(options, problem);
    return problem;
  }
  problem.layer = mha::io::LoadLayer(options.weights, options.num_heads,
                                     options.num_kv_heads, options.prefix);
  problem.layer.config.rotary = options.rotary;
  const mha::io::Array query = mha::io::ReadNpy(options.query);
  const mha::TensorView view = query.view();
  const int rank = view.shape.rank();
  if (view.dtype != mha::DType::kFloat32 || (rank != 2 && rank != 3) ||
      view.shape[rank - 1] != problem.layer.config.query_dim ||
      view.shape[rank - 2] < 1 || (rank == 3 && view.shape[0] < 1)) {
    throw mha::Error(options.query + ": expected float32 [B, S, " +
                     std::to_string(problem.layer.config.query_dim) + "] or [S, " +
                     std::to_string(problem.layer.config.query_dim) + "], got " +
                     mha::DTypeName(view.dtype) + " " + view.shape.ToString());
  }
  problem.query.assign(view.floats(), view.floats() + query.bytes.size() / sizeof(float));
  problem.unbatched = rank == 2;
  problem.query_shape = problem.unbatched ? view.shape.Prepended(1) : view.shape;
  return problem;
}

// The query's tokens as a prefill of S - 2 and single-token steps through a cache of
// the layer's own; the outputs of every step, in place.
std::vector<float> PrefillAndDecode(const mha::MultiheadAttention& layer,
                                    const Problem& problem) {
  const mha::Shape& shape = problem.query_shape;
  const int64_t batch = shape[0], seq = shape[1], dim = shape[2],
                width = layer.output_dim();
  std::vector<float> output(batch * seq * width), step_query, step_output;
  mha::KvCache cache(layer.config(), batch, seq);
  for (int64_t start = 0, tokens = 0; start < seq; start += tokens) {
    tokens = start == 0 ? std::max<int64_t>(seq - 2, 1) : 1;
    step_query.resize(batch * tokens * dim);
    step_output.resize(batch * tokens * width);
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(&problem.query[(b * seq + start) * dim], tokens * dim,
                  &step_query[b * tokens * dim]);
    }
    layer.ForwardWithCache(
        mha::TensorView(step_query.data(), mha::Shape{batch, tokens, dim}), {}, cache,
        mha::MutableTensorView(step_output.data(), mha::Shape{batch, tokens, width}));
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(&step_output[b * tokens * width], tokens * width,
                  &output[(b * seq + start) * width]);
    }
  }
  return output;
}

// One causal forward, and the same tokens decoded through a cache; with all_reduce,
// each summed over the ranks.
struct Outputs {
  std::vector<float> forward, decode;
};

Outputs Run(const mha::MultiheadAttention& layer, const Problem& problem,
            bool all_reduce) {
  const mha::Shape& shape = problem.query_shape;
  const mha::Shape output_shape{shape[0], shape[1], layer.output_dim()};
  Outputs out{std::vector<float>(shape[0] * shape[1] * layer.output_dim()),
              PrefillAndDecode(layer, problem)};
  mha::AttentionMasks causal;
  causal.is_causal = true;
  layer.Forward({mha::TensorView(problem.query.data(), shape), {}, {}}, causal,
                {mha::MutableTensorView(out.forward.data(), output_shape), {}});
  if (all_reduce) {
    for (std::vector<float>* v : {&out.forward, &out.decode}) {
      MPI_Allreduce(MPI_IN_PLACE, v->data(), static_cast<int>(v->size()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
    }
  }
  return out;
}

double MaxError(const std::vector<float>& actual, const std::vector<float>& expected) {
  double error = 0.0, scale = 1.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    error = std::max(error, std::fabs(double(actual[i]) - expected[i]));
    scale = std::max(scale, std::fabs(double(expected[i])));
  }
  return error / scale;
}

// The rotary the layer runs with, said once: a weights file has none unless --rope
// gives it, never silently.
std::string DescribeRotary(const mha::RotaryConfig& rotary) {
  if (!rotary.enabled()) return "none (--rope neox|interleaved adds it)";
  char theta[32];
  std::snprintf(theta, sizeof theta, "%g", rotary.theta);
  return std::string(rotary.pairing == mha::RotaryPairing::kHalfSplit ? "neox"
                                                                      : "interleaved") +
         ", theta " + theta;
}

int Run(const Options& options, const Problem& problem, int rank, int world_size) {
  const mha::AttentionConfig& config = problem.layer.config;
  if (rank == 0) std::printf("rotary: %s\n", DescribeRotary(config.rotary).c_str());
  const mha::HeadShard heads = mha::EvenHeadShard(config, rank, world_size);
  const mha::AttentionShard shard = mha::ShardHeads(config, problem.layer.weights, heads);
  const Outputs sharded =
      Run(mha::MultiheadAttention(shard.config, shard.weights), problem, true);
  std::printf("rank %d of %d: heads [%lld, %lld), %lld KV heads cached\n", rank,
              world_size, static_cast<long long>(heads.first_head),
              static_cast<long long>(heads.end_head),
              static_cast<long long>(shard.config.resolved_num_kv_heads()));
  if (rank == 0 && !options.output.empty()) {
    const mha::Shape& shape = problem.query_shape;
    const int64_t width =
        static_cast<int64_t>(sharded.forward.size() / (shape[0] * shape[1]));
    mha::io::WriteNpy(options.output, sharded.forward.data(),
                      problem.unbatched ? mha::Shape{shape[1], width}
                                        : mha::Shape{shape[0], shape[1], width});
  }
  if (!options.check) return 0;
  const Outputs full =
      Run(mha::MultiheadAttention(config, problem.layer.weights), problem, false);
  double errors[2] = {MaxError(sharded.forward, full.forward),
                      MaxError(sharded.decode, full.decode)};
  MPI_Allreduce(MPI_IN_PLACE, errors, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const bool ok = errors[0] <= 1e-4 && errors[1] <= 1e-4;
  if (rank == 0) {
    std::printf(
        "sharded vs unsharded, max relative error: forward %.3g, decode %.3g: %s\n",
        errors[0], errors[1], ok ? "ok" : "MISMATCH");
  }
  return ok ? 0 : 1;
}

// Parses and loads on every rank. A bad command line or file fails every rank alike,
// so each ends cleanly (MPI_Finalize, exit 2 or 1), the first failing rank saying
// why, instead of an abort whose runtime noise buries the message.
int ParseAndLoad(int argc, char** argv, int rank, int world_size, Options& options,
                 Problem& problem) {
  int code = 0;
  std::string error;
  try {
    options = Parse(argc, argv);
    if (!options.help) problem = Load(options);
  } catch (const mha::cli::UsageError& e) {
    error = std::string(e.what()) + "\n(mha-tensor-parallel --help lists the flags)";
    code = 2;
  } catch (const std::exception& e) {
    error = e.what();
    code = 1;
  }
  int worst = code, first_failing = code != 0 ? rank : world_size;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == first_failing) {
    std::fprintf(
        stderr, "mha-tensor-parallel: %s%s\n",
        world_size > 1 && rank > 0 ? ("rank " + std::to_string(rank) + ": ").c_str() : "",
        error.c_str());
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  Options options;
  Problem problem;
  int status = ParseAndLoad(argc, argv, rank, world_size, options, problem);
  if (status == 0 && options.help) {
    if (rank == 0) std::printf("%s%s%s", kUsage, mha::cli::kRotaryFlagsUsage, kUsageEnd);
  } else if (status == 0) {
    try {
      status = Run(options, problem, rank, world_size);
    } catch (const std::exception& e) {  // a rank's own failure mid-run: the others wait
      std::fprintf(stderr, "mha-tensor-parallel: rank %d: %s\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  MPI_Finalize();
  return status;
}

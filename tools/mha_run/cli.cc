// mha-run: one attention layer on .npy/.safetensors files, to check mha against
// PyTorch or any other implementation.
#include "tools/mha_run/cli.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "mha/mha.hpp"
#include "src/io/latent_layer_file.h"
#include "src/io/layer_file.h"
#include "src/io/npy.h"
#include "tools/mha_run/cached_run.h"
#include "tools/mha_run/feature_flags.h"
#include "tools/mha_run/rotary_flags.h"

namespace mha::cli {
namespace {

constexpr char kUsage[] =
    "usage: mha-run --weights W.safetensors [--prefix P] --num-heads H [--num-kv-heads "
    "G]\n"
    "               --query Q.npy [--key K.npy] [--value V.npy]\n"
    "               [--causal] [--bottom-right] [--attn-mask M.npy]\n"
    "               [--key-padding-mask P.npy] [--key-lengths L.npy]\n"
    "               [--mask-convention torch|sdpa|zero-means-masked]\n"
    "               [--rope neox|interleaved] [--rope-theta T] [--rotary-dim R]\n"
    "               [--rope-scaling linear:F|llama3:F,LOW,HIGH,ORIGINAL|\n"
    "                               dynamic:F,ORIGINAL|longrope:F,ORIGINAL]\n"
    "               [--longrope-factors F.npy]\n"
    "               [--rope-max-positions N] [--position-ids P.npy]\n"
    "               [the feature flags below] [--scale S]\n"
    "               [--cache contiguous|paged [--block-size N] [--decode-steps N]\n"
    "                [--cache-dtype D]]   (causal, as a server runs it)\n"
    "               --output O.npy [--attn-weights A.npy]\n"
    "               [--average-heads] [--threads N] [--isa sse4|avx2|avx512|native]\n"
    "               [--weight-dtype float32|bfloat16|int8] [--compute-dtype "
    "float32|bfloat16]\n"
    "               [--batch-invariant]\n"
    "       mha-run --core --query Q.npy --key K.npy --value V.npy [--layout bhsd|bshd]\n"
    "               [--scale S] [--sinks S.npy] [--key-position-ids P.npy]\n"
    "               [--q-norm-weight QW.npy --k-norm-weight KW.npy]\n"
    "               [--logsumexp L.npy] [the mask, rope and feature flags above]\n"
    "               --output O.npy\n"
    "       mha-run --latent --weights W.safetensors --num-heads H --query X.npy\n"
    "               [--rope interleaved --rope-theta T] [--rope-max-positions N]\n"
    "               [--scale S] [--cache paged [--block-size N]] [--decode-steps N]\n"
    "               [--cache-dtype "
    "float32|bfloat16|int8|float8_e4m3fn|float8_e5m2]\n"
    "               --output O.npy   (an MLA layer: DeepSeek V2/V3 names)\n"
    "flags:\n"
    "  --weights F: a state_dict as safetensors, F32, BF16 or F16 (widened to float32;\n"
    "      mha.save_safetensors writes one); --prefix P: read only the tensors named\n"
    "      with it, taken off (one layer of a checkpoint: model.layers.0.self_attn.)\n"
    "  --num-heads H, --num-kv-heads G: query heads; KV heads (default H)\n"
    "  --query, --key, --value: float32 .npy [B, S, dim] or [S, dim]; key and value\n"
    "      default to the query\n"
    "  --causal, --bottom-right: a causal mask, aligned to the top left (PyTorch's\n"
    "      is_causal) or to the bottom right (a query suffix of the keys)\n"
    "  --attn-mask, --key-padding-mask: bool or float .npy masks, as PyTorch takes "
    "them;\n"
    "      --mask-convention sdpa for F.scaled_dot_product_attention's bool attn_mask\n"
    "      (True = attend), zero-means-masked for 0/1 masks where 0 hides a key\n"
    "  --key-lengths L.npy: int32/int64 [B], each row's valid keys\n"
    "  --rope ...: rotary embeddings; --position-ids P.npy: each token's position\n"
    "  --scale S: the softmax scale (default 1/sqrt(head_dim))\n"
    "  --cache contiguous|paged: run as a server does: a prefill of S - N tokens, then\n"
    "      N = --decode-steps single-token steps through a KV cache of --cache-dtype\n"
    "  --output O.npy: the layer's output; --attn-weights A.npy: the softmax weights\n"
    "      (--average-heads: their mean over heads, PyTorch's default)\n"
    "  --threads N: OpenMP threads (default all); --isa: the widest SIMD path used\n"
    "  --weight-dtype, --compute-dtype: how projections and attention are computed\n"
    "  --batch-invariant: each row's output independent of the batch around it\n"
    "  --core: the attention core on projected [B, H, S, D] (--layout bshd: [B, S, H, "
    "D])\n"
    "  --latent: a multi-head latent attention layer through its latent cache\n"
    "feature flags (layer and --core; mha/feature_options.h):\n";

std::string Usage() { return kUsage + FeatureFlagsUsage(); }

struct Options {
  std::set<std::string> given;                       // every flag on the command line
  std::map<std::string, std::string> files;          // flag -> path
  std::map<std::string, std::string> feature_flags;  // flag -> value ("": a switch)
  int64_t num_heads = 0, num_kv_heads = 0;
  int threads = 0;
  bool causal = false, bottom_right = false, average_heads = false, core = false;
  bool latent = false;  // --latent: an MLA layer (DeepSeek V2/V3)
  bool cached = false;  // --cache (or --latent): a cached run (cached_run.h)
  CachedRun run;
  MaskConvention convention = MaskConvention::kTorch;
  HeadLayout layout = HeadLayout::kBHSD;
  std::optional<float> scale;
  std::string prefix;  // --prefix: the weights' names start with it
  AttentionFeatures features;
  RotaryConfig rotary;
  std::optional<Isa> isa;
  DType weight_dtype = DType::kFloat32;
  DType compute_dtype = DType::kFloat32;  // AttentionConfig's, CoreOptions'
  bool batch_invariant = false;           // ForwardOptions'
};

void ExpectOneOf(const std::string& flag, const std::string& value,
                 std::initializer_list<const char*> choices) {
  std::string list;
  for (const char* choice : choices) {
    if (value == choice) return;
    list += (list.empty() ? "" : ", ") + std::string(choice);
  }
  throw UsageError(flag + ": expected one of " + list + ", got '" + value + "'");
}

// Flags that take a value other than a file; false for an unknown flag.
bool ParseValueFlag(const std::string& flag, const std::string& value, Options& options) {
  if (ParseRotaryFlag(flag, value, options.rotary)) {
  } else if (flag == "--prefix") {
    options.prefix = value;
  } else if (flag == "--scale") {
    options.scale = ParseFloat(flag, value);
  } else if (flag == "--layout") {
    ExpectOneOf(flag, value, {"bhsd", "bshd"});
    options.layout = value == "bhsd" ? HeadLayout::kBHSD : HeadLayout::kBSHD;
  } else if (flag == "--num-heads") {
    options.num_heads = ParseCount(flag, value);
  } else if (flag == "--num-kv-heads") {
    options.num_kv_heads = ParseCount(flag, value);
  } else if (flag == "--threads") {
    const int64_t threads = ParseCount(flag, value);
    if (threads > 4096) {
      throw UsageError(flag + ": expected at most 4096 threads, got '" + value + "'");
    }
    options.threads = static_cast<int>(threads);
  } else if (flag == "--weight-dtype") {
    ExpectOneOf(flag, value, {"float32", "bfloat16", "int8"});
    options.weight_dtype = value == "float32"    ? DType::kFloat32
                           : value == "bfloat16" ? DType::kBFloat16
                                                 : DType::kInt8;
  } else if (flag == "--compute-dtype") {
    ExpectOneOf(flag, value, {"float32", "bfloat16"});
    options.compute_dtype = value == "float32" ? DType::kFloat32 : DType::kBFloat16;
  } else if (flag == "--isa") {
    try {
      options.isa = ParseIsa(value, flag);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  } else if (flag == "--decode-steps") {
    options.run.decode_steps = ParseCount(flag, value);
  } else if (flag == "--block-size") {
    options.run.block_size = ParseCount(flag, value);
  } else if (flag == "--cache") {
    ExpectOneOf(flag, value, {"contiguous", "paged"});
    options.cached = true;
    options.run.paged = value == "paged";
  } else if (flag == "--cache-dtype") {
    ExpectOneOf(flag, value,
                {"float32", "bfloat16", "int8", "float8_e4m3fn", "float8_e5m2"});
    options.run.storage = value == "float32"         ? DType::kFloat32
                          : value == "bfloat16"      ? DType::kBFloat16
                          : value == "int8"          ? DType::kInt8
                          : value == "float8_e4m3fn" ? DType::kFloat8E4M3
                                                     : DType::kFloat8E5M2;
  } else if (flag == "--mask-convention") {
    ExpectOneOf(flag, value, {"torch", "sdpa", "zero-means-masked"});
    options.convention = value == "torch"  ? MaskConvention::kTorch
                         : value == "sdpa" ? MaskConvention::kSdpa
                                           : MaskConvention::kZeroMeansMasked;
  } else {
    return false;
  }
  return true;
}

// A flag the chosen mode does not read is an error, not silently ignored (an output
// file that would never be written, a scale that would not apply).
void CheckFlagsApply(const Options& options) {
  static const std::set<std::string> kLatent = {
      "--latent",      "--weights",      "--num-heads",  "--query",
      "--output",      "--rope",         "--rope-theta", "--rope-max-positions",
      "--scale",       "--decode-steps", "--cache",      "--block-size",
      "--cache-dtype", "--isa",          "--threads",    "--batch-invariant",
      "--prefix"};
  // A cached run is causal self-attention of the query's tokens, one output.
  static const std::set<std::string> kNotCached = {
      "--key",          "--value",           "--attn-mask",     "--key-padding-mask",
      "--key-lengths",  "--attn-weights",    "--average-heads", "--bottom-right",
      "--position-ids", "--mask-convention", "--core"};
  for (const std::string& flag : options.given) {
    if (options.latent && !kLatent.count(flag)) {
      throw UsageError(flag + " does not apply with --latent");
    }
    if (options.cached && kNotCached.count(flag)) {
      throw UsageError(flag + " does not apply with --cache");
    }
  }
  for (const char* flag : {"--decode-steps", "--block-size", "--cache-dtype"}) {
    if (options.given.count(flag) && !options.cached && !options.latent) {
      throw UsageError(std::string(flag) + " applies only with --cache or --latent");
    }
  }
  if (options.given.count("--block-size") && !options.run.paged) {
    throw UsageError("--block-size applies only with --cache paged");
  }
  CheckRotaryFlagsApply(options.given);
  if (options.latent) return;
  static const std::vector<const char*> kCoreOnly = {
      "--sinks",  "--logsumexp",     "--key-position-ids",
      "--layout", "--q-norm-weight", "--k-norm-weight"};
  static const std::vector<const char*> kLayerOnly = {
      "--weights",      "--attn-weights",  "--weight-dtype",    "--num-heads",
      "--num-kv-heads", "--average-heads", "--batch-invariant", "--prefix"};
  for (const char* flag : options.core ? kLayerOnly : kCoreOnly) {
    if (options.given.count(flag)) {
      throw UsageError(std::string(flag) + " applies only " +
                       (options.core ? "without --core (layer mode)" : "with --core"));
    }
  }
}

// Flags whose value is a file.
const char* const kFileFlags[] = {"--weights",
                                  "--query",
                                  "--key",
                                  "--value",
                                  "--attn-mask",
                                  "--key-padding-mask",
                                  "--key-lengths",
                                  "--output",
                                  "--attn-weights",
                                  "--position-ids",
                                  "--key-position-ids",
                                  "--sinks",
                                  "--q-norm-weight",
                                  "--longrope-factors",
                                  "--k-norm-weight",
                                  "--logsumexp"};

// Whether a flag with no value after it is one mha-run knows. ParseValueFlag returns
// false for an unknown flag before it reads the value, and a known one rejects "".
bool KnownFlag(const std::string& flag) {
  if (std::find(std::begin(kFileFlags), std::end(kFileFlags), flag) !=
      std::end(kFileFlags)) {
    return true;
  }
  Options scratch;
  try {
    return ParseValueFlag(flag, "", scratch);
  } catch (const std::exception&) {
    return true;
  }
}

Options Parse(const std::vector<std::string>& args) {
  static const std::map<std::string, bool Options::*> kSwitches = {
      {"--causal", &Options::causal},
      {"--bottom-right", &Options::bottom_right},
      {"--average-heads", &Options::average_heads},
      {"--core", &Options::core},
      {"--latent", &Options::latent},
      {"--batch-invariant", &Options::batch_invariant}};
  Options options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    options.given.insert(flag);
    if (kSwitches.count(flag)) {
      options.*kSwitches.at(flag) = true;
      continue;
    }
    bool takes_value = false;
    if (IsFeatureFlag(flag, takes_value)) {
      if (takes_value && i + 1 >= args.size()) {
        throw UsageError("missing value after " + flag);
      }
      options.feature_flags[flag] = takes_value ? args[++i] : "";
      continue;
    }
    if (i + 1 >= args.size()) {
      throw UsageError(KnownFlag(flag) ? "missing value after " + flag
                                       : "unknown flag '" + flag + "'");
    }
    const std::string& value = args[++i];
    if (std::find(std::begin(kFileFlags), std::end(kFileFlags), flag) !=
        std::end(kFileFlags)) {
      options.files[flag] = value;
    } else if (!ParseValueFlag(flag, value, options)) {
      throw UsageError("unknown flag '" + flag + "'");
    }
  }
  CheckFlagsApply(options);
  options.features = ParseFeatureFlags(options.feature_flags);
  options.run.options.num_threads = options.threads;
  options.run.options.batch_invariant = options.batch_invariant;
  const std::vector<const char*> required =
      options.core ? std::vector<const char*>{"--query", "--key", "--value", "--output"}
                   : std::vector<const char*>{"--weights", "--query", "--output"};
  for (const char* name : required) {
    if (!options.files.count(name)) throw UsageError(std::string("missing ") + name);
  }
  if (!options.core && options.num_heads < 1) {
    throw UsageError("--num-heads must be given and >= 1");
  }
  return options;
}

// Loads the .npy named by `flag`, if given.
std::optional<io::Array> Load(const Options& options, const std::string& flag) {
  const auto it = options.files.find(flag);
  if (it == options.files.end()) return std::nullopt;
  return io::ReadNpy(it->second);
}

// The outputs are sized from the inputs' shapes: those must fit the layer first, so
// that a malformed file is an error, not an allocation.
void CheckInputShape(const char* flag, const std::optional<io::Array>& array,
                     int64_t width) {
  if (!array) return;
  const Shape& shape = array->shape;
  const int rank = shape.rank();
  if ((rank != 2 && rank != 3) || shape[rank - 1] != width ||
      (rank == 3 && shape[0] < 1) || shape[rank - 2] < 1) {
    throw io::FileError(std::string(flag) + ": expected shape [B, S, " +
                        std::to_string(width) + "] or [S, " + std::to_string(width) +
                        "] with B, S >= 1, got " + shape.ToString());
  }
}

TensorView View(const std::optional<io::Array>& array) {
  return array ? array->view() : TensorView();
}

// The mask files and flags; the arrays stay alive in `arrays`.
AttentionMasks LoadMasks(const Options& options,
                         std::vector<std::optional<io::Array>>& arrays) {
  for (const char* flag : {"--attn-mask", "--key-padding-mask", "--key-lengths"}) {
    arrays.push_back(Load(options, flag));
  }
  AttentionMasks masks;
  masks.is_causal = options.causal;
  if (options.bottom_right) masks.causal_alignment = CausalAlignment::kBottomRight;
  masks.attn_mask = View(arrays[0]);
  masks.key_padding_mask = View(arrays[1]);
  masks.key_lengths = View(arrays[2]);
  masks.convention = options.convention;
  return masks;
}

// --rope and its flags, with LongRoPE's factors read from --longrope-factors.
RotaryConfig Rotary(const Options& options) {
  RotaryConfig rotary = options.rotary;
  const auto factors = options.files.find("--longrope-factors");
  if (factors != options.files.end()) LoadLongRopeFactors(factors->second, rotary);
  return rotary;
}

// --core: the attention-core API on projected q/k/v arrays [B, H, S, D] or [B, S, H, D].
int RunCore(const Options& options) {
  const auto query = Load(options, "--query"), key = Load(options, "--key"),
             value = Load(options, "--value"), sinks = Load(options, "--sinks"),
             query_norm = Load(options, "--q-norm-weight"),
             key_norm = Load(options, "--k-norm-weight"),
             positions = Load(options, "--position-ids"),
             key_positions = Load(options, "--key-position-ids");
  for (const auto* array : {&*query, &*key, &*value}) {
    const Shape& shape = array->shape;
    if (array->dtype != DType::kFloat32 || shape.rank() != 4 ||
        std::min({shape[0], shape[1], shape[2], shape[3]}) < 1) {
      throw io::FileError(
          "--core: query, key and value must be float32 rank-4 arrays with every "
          "dimension >= 1, got " +
          shape.ToString());
    }
  }
  std::vector<std::optional<io::Array>> mask_arrays;
  const AttentionMasks masks = LoadMasks(options, mask_arrays);
  CoreOptions core;
  core.scale = options.scale;
  core.features = options.features;
  core.sinks = View(sinks);
  core.query_norm_weight = View(query_norm);
  core.key_norm_weight = View(key_norm);
  core.query_positions = View(positions);
  core.key_positions = View(key_positions);
  core.num_threads = options.threads;
  core.compute_dtype = options.compute_dtype;
  std::optional<RotaryEmbedding> rotary;
  if (options.rotary.enabled()) {
    rotary.emplace(Rotary(options), query->shape[3]);
    core.rotary = &*rotary;
  }
  const Shape& q = query->shape;
  const bool bhsd = options.layout == HeadLayout::kBHSD;
  const int64_t heads = bhsd ? q[1] : q[2], sq = bhsd ? q[2] : q[1];
  // The output has the values' width (MLA's absorbed form: the latent's).
  const Shape out_shape{q[0], q[1], q[2], value->shape[3]};
  std::vector<float> output(io::CheckedByteSize("output", out_shape, DType::kFloat32) /
                            4);
  std::vector<float> lse(options.files.count("--logsumexp") ? q[0] * heads * sq : 0);
  core.layout = options.layout;
  ScaledDotProductAttention(query->view(), key->view(), value->view(), masks,
                            MutableTensorView(output.data(), out_shape), core,
                            lse.empty()
                                ? MutableTensorView()
                                : MutableTensorView(lse.data(), Shape{q[0], heads, sq}));
  io::WriteNpy(options.files.at("--output"), output.data(), out_shape);
  if (!lse.empty()) {
    io::WriteNpy(options.files.at("--logsumexp"), lse.data(), Shape{q[0], heads, sq});
  }
  return 0;
}

// --latent: hidden states [B, S, hidden] through an MLA layer and its latent cache
// (contiguous unless --cache paged).
int RunLatent(const Options& options) {
  io::LoadedLatentLayer layer = io::LoadLatentLayer(options.files.at("--weights"),
                                                    options.num_heads, options.prefix);
  layer.config.rotary = Rotary(options);
  layer.config.softmax_scale = options.scale;
  const MultiheadLatentAttention attention(layer.config, layer.weights);
  const auto hidden = Load(options, "--query");
  const Shape& shape = hidden->shape;
  if (hidden->dtype != DType::kFloat32 || shape.rank() != 3 || shape[0] < 1 ||
      shape[1] < 1) {
    throw io::FileError(
        "--query: --latent expects float32 hidden states [B, S, hidden], "
        "got " +
        shape.ToString());
  }
  const std::vector<float> output = RunCached(attention, options.run, hidden->view());
  io::WriteNpy(options.files.at("--output"), output.data(), shape);
  return 0;
}

// --cache: the layer's causal self-attention of query [B, S, query_dim] through a
// cache, as a server runs it.
int RunLayerCached(const MultiheadAttention& attention, const Options& options) {
  const auto query = Load(options, "--query");
  const Shape& q = query->shape;
  CheckInputShape("--query", query, attention.config().query_dim);
  if (query->dtype != DType::kFloat32 || q.rank() != 3) {
    throw io::FileError("--query: --cache expects float32 [B, S, query_dim], got " +
                        q.ToString());
  }
  const std::vector<float> output = RunCached(attention, options.run, query->view());
  io::WriteNpy(options.files.at("--output"), output.data(),
               Shape{q[0], q[1], attention.output_dim()});
  return 0;
}

int Run(const Options& options) {
  if (options.isa) SetMaxIsa(*options.isa);
  if (options.core) return RunCore(options);
  if (options.latent) return RunLatent(options);
  io::LoadedLayer layer = io::LoadLayer(options.files.at("--weights"), options.num_heads,
                                        options.num_kv_heads, options.prefix);
  layer.config.features = options.features;
  layer.config.scale = options.scale;
  layer.config.rotary = Rotary(options);
  layer.config.weight_dtype = options.weight_dtype;
  layer.config.compute_dtype = options.compute_dtype;
  const MultiheadAttention attention(layer.config, layer.weights);
  if (options.cached) return RunLayerCached(attention, options);
  const auto query = Load(options, "--query"), key = Load(options, "--key"),
             value = Load(options, "--value"),
             positions = Load(options, "--position-ids");

  CheckInputShape("--query", query, layer.config.query_dim);
  CheckInputShape("--key", key, layer.config.resolved_key_dim());
  const AttentionInputs inputs{View(query), View(key), View(value)};
  std::vector<std::optional<io::Array>> mask_arrays;
  const AttentionMasks masks = LoadMasks(options, mask_arrays);

  // Output shapes follow the query's: [B, Sq, dim] or unbatched [Sq, dim].
  const Shape& q = query->shape;
  const bool batched = q.rank() == 3;
  const int64_t b = batched ? q[0] : 1, sq = q.rank() >= 2 ? q[q.rank() - 2] : 0;
  const Shape& k = key ? key->shape : q;
  const int64_t sk = k.rank() >= 2 ? k[k.rank() - 2] : 0;
  const auto shaped = [&](Shape rest) { return batched ? rest.Prepended(b) : rest; };
  const Shape out_shape = shaped(Shape{sq, attention.output_dim()});
  const Shape weights_shape = options.average_heads
                                  ? shaped(Shape{sq, sk})
                                  : shaped(Shape{options.num_heads, sq, sk});
  const bool want_weights = options.files.count("--attn-weights") != 0;
  std::vector<float> output(static_cast<size_t>(std::max<int64_t>(b * sq, 0)) *
                            attention.output_dim());
  std::vector<float> weights(
      want_weights
          ? io::CheckedByteSize("attn weights", weights_shape, DType::kFloat32) / 4
          : 0);
  ForwardOptions forward;
  forward.average_attn_weights = options.average_heads;
  forward.num_threads = options.threads;
  forward.position_ids = View(positions);
  forward.batch_invariant = options.batch_invariant;
  attention.Forward(inputs, masks,
                    {MutableTensorView(output.data(), out_shape),
                     want_weights ? MutableTensorView(weights.data(), weights_shape)
                                  : MutableTensorView()},
                    forward);
  io::WriteNpy(options.files.at("--output"), output.data(), out_shape);
  if (want_weights) {
    io::WriteNpy(options.files.at("--attn-weights"), weights.data(), weights_shape);
  }
  return 0;
}

}  // namespace

int RunMhaCli(const std::vector<std::string>& args, std::ostream& out,
              std::ostream& err) {
  try {
    const bool help = std::any_of(args.begin(), args.end(), [](const std::string& arg) {
      return arg == "--help" || arg == "-h";
    });
    if (help) {
      out << Usage();
      return 0;
    }
    if (args.empty()) {
      err << Usage();
      return 2;
    }
    return Run(Parse(args));
  } catch (const UsageError& e) {
    err << "mha-run: " << e.what() << "\n(mha-run --help lists every flag)\n";
    return 2;
  } catch (const std::exception& e) {
    err << "mha-run: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace mha::cli

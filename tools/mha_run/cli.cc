// mha-run: one attention layer on .npy/.safetensors files, to check mha against
// PyTorch or any other implementation.
#include "tools/mha_run/cli.h"

#include <algorithm>
#include <map>
#include <optional>

#include "mha/mha.hpp"
#include "tools/io/layer_file.h"
#include "tools/io/npy.h"

namespace mha::cli {
namespace {

constexpr char kUsage[] =
    "usage: mha-run --weights W.safetensors --num-heads H [--num-kv-heads G]\n"
    "               --query Q.npy [--key K.npy] [--value V.npy]\n"
    "               [--causal] [--attn-mask M.npy] [--key-padding-mask P.npy]\n"
    "               [--key-lengths L.npy] [--mask-convention torch|zero-means-masked]\n"
    "               --output O.npy [--attn-weights A.npy] [--average-heads] [--threads "
    "N]\n";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::map<std::string, std::string> files;  // flag -> path
  int64_t num_heads = 0, num_kv_heads = 0;
  int threads = 0;
  bool causal = false, average_heads = false;
  MaskConvention convention = MaskConvention::kTorch;
};

int64_t ParseCount(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || value < 0) {
    throw UsageError(flag + ": expected a non-negative integer, got '" + text + "'");
  }
  return value;
}

Options Parse(const std::vector<std::string>& args) {
  static const char* kFileFlags[] = {"--weights",     "--query",     "--key",
                                     "--value",       "--attn-mask", "--key-padding-mask",
                                     "--key-lengths", "--output",    "--attn-weights"};
  Options options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--causal") {
      options.causal = true;
      continue;
    }
    if (flag == "--average-heads") {
      options.average_heads = true;
      continue;
    }
    if (i + 1 >= args.size()) throw UsageError("missing value after " + flag);
    const std::string& value = args[++i];
    if (std::find(std::begin(kFileFlags), std::end(kFileFlags), flag) !=
        std::end(kFileFlags)) {
      options.files[flag] = value;
    } else if (flag == "--num-heads") {
      options.num_heads = ParseCount(flag, value);
    } else if (flag == "--num-kv-heads") {
      options.num_kv_heads = ParseCount(flag, value);
    } else if (flag == "--threads") {
      options.threads =
          static_cast<int>(std::min<int64_t>(ParseCount(flag, value), 4096));
    } else if (flag == "--mask-convention" && value == "torch") {
      options.convention = MaskConvention::kTorch;
    } else if (flag == "--mask-convention" && value == "zero-means-masked") {
      options.convention = MaskConvention::kZeroMeansMasked;
    } else {
      throw UsageError("unknown argument '" + flag + " " + value + "'");
    }
  }
  for (const char* required : {"--weights", "--query", "--output"}) {
    if (!options.files.count(required))
      throw UsageError(std::string("missing ") + required);
  }
  if (options.num_heads < 1) throw UsageError("--num-heads must be given and >= 1");
  return options;
}

// Loads the .npy named by `flag`, if given.
std::optional<io::Array> Load(const Options& options, const std::string& flag) {
  const auto it = options.files.find(flag);
  if (it == options.files.end()) return std::nullopt;
  return io::ReadNpy(it->second);
}

TensorView View(const std::optional<io::Array>& array) {
  return array ? array->view() : TensorView();
}

int Run(const Options& options) {
  const io::LoadedLayer layer = io::LoadLayer(options.files.at("--weights"),
                                              options.num_heads, options.num_kv_heads);
  const MultiheadAttention attention(layer.config, layer.weights);
  const auto query = Load(options, "--query"), key = Load(options, "--key"),
             value = Load(options, "--value"), attn_mask = Load(options, "--attn-mask"),
             padding = Load(options, "--key-padding-mask"),
             lengths = Load(options, "--key-lengths");

  const AttentionInputs inputs{View(query), View(key), View(value)};
  AttentionMasks masks;
  masks.is_causal = options.causal;
  masks.attn_mask = View(attn_mask);
  masks.key_padding_mask = View(padding);
  masks.key_lengths = View(lengths);
  masks.convention = options.convention;

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

int RunMhaCli(const std::vector<std::string>& args, std::ostream& err) {
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      err << kUsage;
      return args.empty() ? 2 : 0;
    }
    return Run(Parse(args));
  } catch (const UsageError& e) {
    err << "mha-run: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    err << "mha-run: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace mha::cli

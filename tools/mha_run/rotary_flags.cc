// The rotary-embedding flags (rotary_flags.h).
#include "tools/mha_run/rotary_flags.h"

#include <algorithm>
#include <vector>

#include "src/io/npy.h"
#include "tools/mha_run/feature_flags.h"

namespace mha::cli {
namespace {

// linear:F, llama3:F,LOW,HIGH,ORIGINAL, dynamic:F,ORIGINAL or longrope:F,ORIGINAL
RopeScaling ParseRopeScaling(const std::string& text) {
  const std::string flag = "--rope-scaling";
  RopeScaling scaling;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  std::vector<std::string> values;
  for (size_t begin = colon == std::string::npos ? text.size() : colon + 1;
       begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    values.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  if (kind == "linear" && values.size() == 1) {
    scaling.type = RopeScalingType::kLinear;
  } else if (kind == "llama3" && values.size() == 4) {
    scaling.type = RopeScalingType::kLlama3;
    scaling.low_freq_factor = ParseNumber(flag, values[1]);
    scaling.high_freq_factor = ParseNumber(flag, values[2]);
    scaling.original_max_position_embeddings = ParseCount(flag, values[3]);
  } else if ((kind == "dynamic" || kind == "longrope") && values.size() == 2) {
    scaling.type =
        kind == "dynamic" ? RopeScalingType::kDynamic : RopeScalingType::kLongRope;
    scaling.original_max_position_embeddings = ParseCount(flag, values[1]);
  } else {
    throw UsageError(
        flag +
        ": expected linear:F, llama3:F,LOW,HIGH,ORIGINAL, dynamic:F,ORIGINAL "
        "or longrope:F,ORIGINAL, got '" +
        text + "'");
  }
  scaling.factor = ParseNumber(flag, values[0]);
  return scaling;
}

}  // namespace

const char kRotaryFlagsUsage[] =
    "  --rope neox|interleaved: rotary embeddings (none without it), Llama's\n"
    "      rotate_half pairing or GPT-J's interleaved pairs; with it:\n"
    "      --rope-theta T (default 10000), --rotary-dim R (default head_dim),\n"
    "      --rope-scaling linear:F|llama3:F,LOW,HIGH,ORIGINAL|dynamic:F,ORIGINAL|\n"
    "      longrope:F,ORIGINAL (with --longrope-factors F.npy: [2, R / 2] short, long),\n"
    "      --rope-max-positions N: the table's positions\n";

bool IsRotaryFlag(const std::string& flag) {
  for (const char* known : {"--rope", "--rope-theta", "--rotary-dim", "--rope-scaling",
                            "--rope-max-positions"}) {
    if (flag == known) return true;
  }
  return false;
}

bool ParseRotaryFlag(const std::string& flag, const std::string& value,
                     RotaryConfig& rotary) {
  if (flag == "--rope") {
    if (value != "neox" && value != "interleaved") {
      throw UsageError(flag + ": expected one of neox, interleaved, got '" + value + "'");
    }
    rotary.pairing =
        value == "neox" ? RotaryPairing::kHalfSplit : RotaryPairing::kInterleaved;
  } else if (flag == "--rope-theta") {
    rotary.theta = ParseNumber(flag, value);
  } else if (flag == "--rotary-dim") {
    rotary.rotary_dim = ParseCount(flag, value);
  } else if (flag == "--rope-scaling") {
    rotary.scaling = ParseRopeScaling(value);
  } else if (flag == "--rope-max-positions") {
    rotary.max_positions = ParseCount(flag, value);
  } else {
    return false;
  }
  return true;
}

void CheckRotaryFlagsApply(const std::set<std::string>& given) {
  for (const char* flag : {"--rope-theta", "--rotary-dim", "--rope-scaling",
                           "--rope-max-positions", "--longrope-factors"}) {
    if (given.count(flag) && !given.count("--rope")) {
      throw UsageError(std::string(flag) + " applies only with --rope");
    }
  }
}

void LoadLongRopeFactors(const std::string& path, RotaryConfig& rotary) {
  const io::Array factors = io::ReadNpy(path);
  const Shape& shape = factors.shape;
  if (factors.dtype != DType::kFloat32 || shape.rank() != 2 || shape[0] != 2) {
    throw io::FileError(
        "--longrope-factors: expected a float32 [2, rotary_dim / 2] "
        "array (short, long), got " +
        shape.ToString());
  }
  const float* values = reinterpret_cast<const float*>(factors.bytes.data());
  rotary.scaling.short_factor.assign(values, values + shape[1]);
  rotary.scaling.long_factor.assign(values + shape[1], values + 2 * shape[1]);
}

}  // namespace mha::cli

// mha-run on bad files and bad arguments: a clear error and a non-zero exit code,
// never a crash. Good files are covered by pytorch_fixtures_test.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/io/npy.h"
#include "tests/test_util.h"
#include "tools/mha_run/cli.h"

namespace mha::testing {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  // Named after the test too: ctest -j runs the tests as concurrent processes.
  const std::string test =
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return (fs::path(::testing::TempDir()) / ("mha_run_test_" + test + "_" + name))
      .string();
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string Bytes(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

// A safetensors file from a JSON header and raw data.
std::string Safetensors(const std::string& name, const std::string& header,
                        const std::string& data) {
  const uint64_t length = header.size();
  return WriteFile(name, Bytes(&length, 8) + header + data);
}

std::string NpyWithHeader(const std::string& name, const std::string& dict,
                          const std::string& data) {
  std::string header = dict;
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  const uint16_t length = static_cast<uint16_t>(header.size());
  return WriteFile(
      name, std::string("\x93NUMPY\x01\x00", 8) + Bytes(&length, 2) + header + data);
}

class MhaRun : public ::testing::Test {
 protected:
  void SetUp() override {
    // A valid layer (E=4, 2 heads) and query [1, 3, 4].
    const std::vector<float> w = RandomFloats(3 * 4 * 4, 1);
    weights_ = Safetensors(
        "weights.safetensors",
        R"({"in_proj_weight":{"dtype":"F32","shape":[12,4],"data_offsets":[0,192]}})",
        Bytes(w.data(), 192));
    const std::vector<float> q = RandomFloats(12, 2);
    query_ = TempPath("query.npy");
    io::WriteNpy(query_, q.data(), Shape{1, 3, 4});
    output_ = TempPath("output.npy");
  }

  // Runs mha-run and returns (exit code, stderr).
  std::pair<int, std::string> Run(std::vector<std::string> args) {
    std::ostringstream err;
    const int code = cli::RunMhaCli(args, err);
    return {code, err.str()};
  }

  std::vector<std::string> Args(const std::string& weights, const std::string& query) {
    return {"--weights", weights, "--num-heads", "2",
            "--query",   query,   "--output",    output_};
  }

  // The valid layer's arguments and `extra`.
  std::vector<std::string> with_args(const std::vector<std::string>& extra) {
    std::vector<std::string> args = Args(weights_, query_);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // The output of a run of the valid layer with `extra`, which must succeed.
  std::vector<float> OutputWith(const std::vector<std::string>& extra) {
    const auto [code, err] = Run(with_args(extra));
    EXPECT_EQ(code, 0) << err;
    const io::Array out = io::ReadNpy(output_);
    const auto* values = reinterpret_cast<const float*>(out.bytes.data());
    return std::vector<float>(values, values + out.bytes.size() / 4);
  }

  void ExpectFailure(const std::vector<std::string>& args, int code,
                     const std::vector<std::string>& message_parts) {
    const auto [actual, err] = Run(args);
    EXPECT_EQ(actual, code) << err;
    for (const std::string& part : message_parts) {
      EXPECT_NE(err.find(part), std::string::npos) << "\"" << err << "\" lacks " << part;
    }
  }

  std::string weights_, query_, output_;
};

TEST_F(MhaRun, ValidRunWritesOutput) {
  const auto [code, err] = Run(Args(weights_, query_));
  ASSERT_EQ(code, 0) << err;
  EXPECT_EQ(io::ReadNpy(output_).shape, (Shape{1, 3, 4}));
}

// --scale is AttentionConfig::scale in layer mode: 1 / sqrt(head_dim) is the default's
// bits, another scale changes the output.
TEST_F(MhaRun, LayerScale) {
  const auto unscaled = OutputWith({"--causal"});
  EXPECT_EQ(OutputWith({"--causal", "--scale", "0.70710678118654752"}), unscaled);
  EXPECT_NE(OutputWith({"--causal", "--scale", "3"}), unscaled);
}

// --cache runs the causal layer as a server does (a prompt step, then one token per
// step) through either cache: the causal forward's output.
TEST_F(MhaRun, CachedRunsGiveTheCausalForward) {
  const std::vector<float> causal = OutputWith({"--causal"});
  ExpectClose(OutputWith({"--cache", "contiguous", "--decode-steps", "1"}), causal,
              "contiguous cache");
  ExpectClose(OutputWith({"--cache", "paged", "--decode-steps", "2"}), causal,
              "paged cache");
  ExpectClose(OutputWith({"--cache", "paged", "--block-size", "32"}), causal,
              "one paged step");
  ExpectFailure(with_args({"--cache", "paged", "--key", query_}), 2,
                {"--key does not apply with --cache"});
  ExpectFailure(with_args({"--block-size", "32"}), 2,
                {"--block-size applies only with --cache or --latent"});
  ExpectFailure(with_args({"--cache", "contiguous", "--block-size", "32"}), 2,
                {"--block-size applies only with --cache paged"});
  ExpectFailure(with_args({"--cache", "paged", "--decode-steps", "3"}), 2,
                {"--decode-steps: must be below the sequence length 3, got 3"});
}

// The layer's compute dtype and batch invariance from the command line: bf16 attention
// stays within bf16's bound of fp32's output, batch-invariant projections within fp32
// rounding; the core takes no batch invariance.
TEST_F(MhaRun, ComputeDtypeAndBatchInvariance) {
  const std::vector<float> fp32 = OutputWith({"--causal"});
  ExpectClose(OutputWith({"--causal", "--compute-dtype", "bfloat16"}), fp32,
              "bf16 compute", 3e-2);
  ExpectClose(OutputWith({"--causal", "--batch-invariant"}), fp32, "batch invariant");
  ExpectClose(OutputWith({"--cache", "paged", "--decode-steps", "1", "--batch-invariant",
                          "--threads", "1"}),
              fp32, "paged, batch invariant");
  ExpectFailure({"--core", "--query", query_, "--key", query_, "--value", query_,
                 "--output", output_, "--batch-invariant"},
                2, {"--batch-invariant applies only without --core"});
  ExpectFailure(with_args({"--compute-dtype", "int8"}), 2,
                {"--compute-dtype: expected one of float32, bfloat16, got 'int8'"});
}

TEST_F(MhaRun, UsageErrors) {
  ExpectFailure({}, 2, {"usage"});
  ExpectFailure({"--weights", weights_, "--query", query_}, 2, {"missing --output"});
  ExpectFailure({"--bogus", "1"}, 2, {"unknown flag '--bogus'"});
  ExpectFailure(
      {"--weights", weights_, "--num-heads", "x", "--query", query_, "--output", output_},
      2, {"--num-heads", "'x'"});
  ExpectFailure({"--weights"}, 2, {"missing value after --weights"});
  ExpectFailure({"--weights", weights_, "--bogus"}, 2, {"unknown flag '--bogus'"});
  // One line of what is wrong and where the flags are listed, not the whole synopsis.
  const auto [code, err] = Run({"--bogus", "1"});
  EXPECT_EQ(err.find("usage:"), std::string::npos) << err;
  EXPECT_NE(err.find("mha-run --help"), std::string::npos) << err;
  // --help wherever it stands: the synopsis and every feature flag's help, exit 0.
  const auto [help_code, help] = Run({"--weights", weights_, "--help"});
  EXPECT_EQ(help_code, 0);
  EXPECT_NE(help.find("usage: mha-run"), std::string::npos) << help;
  EXPECT_NE(help.find("--sliding-window"), std::string::npos) << help;
  // A .npy given as the weights is named for what it is.
  ExpectFailure(
      {"--weights", query_, "--num-heads", "2", "--query", query_, "--output", output_},
      1, {"is a .npy file, not safetensors", "mha.save_safetensors"});
  ExpectFailure({"--weights", weights_, "--query", query_, "--output", output_,
                 "--threads", "99999999999"},
                2, {"--threads: expected at most 4096 threads, got '99999999999'"});
}

TEST_F(MhaRun, DecoderFeatureFlags) {
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = Args(weights_, query_);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const auto [code, err] =
      Run(with({"--causal", "--rope", "neox", "--rope-scaling", "llama3:8,1,4,16",
                "--sliding-window", "2", "--attention-chunk-size", "2", "--softcap",
                "4.5", "--alibi"}));
  EXPECT_EQ(code, 0) << err;
  ExpectFailure(with({"--rope", "gptj"}), 2,
                {"--rope: expected one of neox, interleaved, got 'gptj'"});
  ExpectFailure(with({"--layout", "bsdh"}), 2, {"--layout: expected one of bhsd, bshd"});
  ExpectFailure(with({"--rope-scaling", "llama3:8,1"}), 2,
                {"--rope-scaling", "llama3:F,LOW,HIGH,ORIGINAL", "'llama3:8,1'"});
  ExpectFailure(with({"--softcap", "big"}), 2, {"--softcap: expected a number", "'big'"});
  ExpectFailure(with({"--rope", "neox", "--rope-scaling", "dynamic:2"}), 2,
                {"--rope-scaling", "dynamic:F,ORIGINAL", "'dynamic:2'"});
  ExpectFailure(with({"--rope", "neox", "--rope-scaling", "longrope:4,4"}), 1,
                {"rotary.scaling.short_factor: expected rotary_dim / 2"});
  ExpectFailure(with({"--longrope-factors", query_}), 2,
                {"--longrope-factors applies only with --rope"});
  {
    const auto [dynamic_code, dynamic_err] =
        Run(with({"--causal", "--rope", "neox", "--rope-scaling", "dynamic:2,2"}));
    EXPECT_EQ(dynamic_code, 0) << dynamic_err;
  }
  ExpectFailure(with({"--sliding-window", "0"}), 1, {"features.sliding_window", "got 0"});
  ExpectFailure(with({"--attention-chunk-size", "0"}), 1,
                {"features.attention_chunk_size", "got 0"});
  ExpectFailure(
      with({"--temperature-tuning-floor-scale", "8192"}), 2,
      {"--temperature-tuning-floor-scale applies only with --temperature-tuning"});
  ExpectFailure(with({"--temperature-tuning", "--temperature-tuning-floor-scale", "0"}),
                1, {"features.temperature_tuning.floor_scale", "got 0"});
  ExpectFailure(with({"--softcap", "0"}), 1, {"features.softcap", "got 0"});
  ExpectFailure(
      with({"--qk-norm", "--qk-norm-scope", "per_token"}), 2,
      {"--qk-norm-scope: expected one of per_head, across_heads, got 'per_token'"});
  ExpectFailure(with({"--qk-norm-eps", "1e-5"}), 2,
                {"--qk-norm-eps applies only with --qk-norm"});
  ExpectFailure(with({"--qk-norm"}), 1,
                {"weights.query_norm_weight: required by features.qk_norm"});
  ExpectFailure(with({"--q-norm-weight", query_}), 2,
                {"--q-norm-weight applies only with --core"});
  ExpectFailure(with({"--rope", "neox", "--rotary-dim", "3"}), 1,
                {"rotary_dim", "got 3"});
  ExpectFailure({"--core", "--query", query_, "--output", output_}, 2, {"missing --key"});
  ExpectFailure({"--core", "--query", query_, "--key", query_, "--value", query_,
                 "--output", output_},
                1, {"--core", "rank-4"});
}

// Flags the mode does not read are refused, not ignored (an output file that would
// never be written, a scale that would not apply).
TEST_F(MhaRun, FlagsThatDoNotApplyAreRefused) {
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = Args(weights_, query_);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::string lse = TempPath("lse.npy");
  for (const auto& extra :
       std::vector<std::vector<std::string>>{{"--sinks", query_},
                                             {"--logsumexp", lse},
                                             {"--key-position-ids", query_},
                                             {"--layout", "bshd"}}) {
    ExpectFailure(with(extra), 2, {extra[0] + " applies only with --core"});
  }
  EXPECT_FALSE(std::ifstream(lse).good()) << "no file for a refused run";
  const std::vector<std::string> core = {"--core", "--query",  query_,
                                         "--key",  query_,     "--value",
                                         query_,   "--output", output_};
  for (const auto& extra :
       std::vector<std::vector<std::string>>{{"--weights", weights_},
                                             {"--attn-weights", lse},
                                             {"--weight-dtype", "int8"},
                                             {"--num-heads", "2"}}) {
    std::vector<std::string> args = core;
    args.insert(args.end(), extra.begin(), extra.end());
    ExpectFailure(args, 2, {extra[0] + " applies only without --core"});
  }
  ExpectFailure(with({"--rope-scaling", "linear:2"}), 2,
                {"--rope-scaling applies only with --rope"});
  ExpectFailure(with({"--rope-theta", "10"}), 2,
                {"--rope-theta applies only with --rope"});
}

TEST_F(MhaRun, LatentModeTakesItsOwnFlags) {
  std::vector<std::string> latent = Args(weights_, query_);
  latent.insert(latent.begin(), "--latent");
  std::vector<std::string> causal = latent;
  causal.push_back("--causal");
  ExpectFailure(causal, 2, {"--causal does not apply with --latent"});
  std::vector<std::string> layer = Args(weights_, query_);
  layer.insert(layer.end(), {"--decode-steps", "1"});
  ExpectFailure(layer, 2, {"--decode-steps applies only with --cache or --latent"});
  std::vector<std::string> theta = latent;
  theta.insert(theta.end(), {"--rope-theta", "10"});
  ExpectFailure(theta, 2, {"--rope-theta applies only with --rope"});
  ExpectFailure(latent, 1, {"no tensor 'kv_a_layernorm.weight'"});  // an MHA file
}

// A latent layer's file whose tensors have the given shapes (zeros: the sizes fail
// before any value is read).
std::string LatentFile(const std::string& name,
                       const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::string header = "{", data;
  for (const auto& [tensor, shape] : tensors) {
    const size_t bytes =
        static_cast<size_t>(shape[0] * (shape.rank() == 2 ? shape[1] : 1)) * 4;
    header += (header.size() > 1 ? "," : "") + ("\"" + tensor + "\":{\"dtype\":\"F32\"") +
              ",\"shape\":[" + std::to_string(shape[0]) +
              (shape.rank() == 2 ? "," + std::to_string(shape[1]) : "") +
              "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes) + "]}";
    data.append(bytes, '\0');
  }
  return Safetensors(name, header + "}", data);
}

TEST_F(MhaRun, LatentFilesNameTheTensorBehindABadSize) {
  // hidden 4, 2 heads, rank 32, rope 16, nope 8, v 8.
  std::vector<std::pair<std::string, Shape>> tensors = {
      {"kv_a_layernorm.weight", Shape{32}},
      {"kv_a_proj_with_mqa.weight", Shape{48, 4}},
      {"kv_b_proj.weight", Shape{32, 32}},
      {"o_proj.weight", Shape{4, 16}},
      {"q_proj.weight", Shape{48, 4}}};
  const auto run = [&](const std::string& name) {
    std::vector<std::string> args = Args(LatentFile(name, tensors), query_);
    args.insert(args.begin(), "--latent");
    return args;
  };
  tensors[1].second = Shape{24, 4};
  ExpectFailure(run("short_kv_a.safetensors"), 1,
                {"'kv_a_proj_with_mqa.weight' of shape [24, 4] gives qk_rope_head_dim = "
                 "its rows 24 - kv_lora_rank 32 (kv_a_layernorm.weight's length) = -8"});
  tensors[1].second = Shape{48, 4};
  tensors[4].second = Shape{32, 4};
  ExpectFailure(run("short_q.safetensors"), 1,
                {"'q_proj.weight' of shape [32, 4] gives qk_nope_head_dim = its rows per "
                 "head 16 - qk_rope_head_dim 16 = 0, must be >= 1"});
  tensors[4].second = Shape{48, 4};
  tensors[2].second = Shape{16, 32};
  ExpectFailure(run("short_kv_b.safetensors"), 1,
                {"'kv_b_proj.weight' of shape [16, 32] gives v_head_dim"});
  tensors[2].second = Shape{32, 32};
  tensors.push_back({"q_a_proj.weight", Shape{8, 4}});
  ExpectFailure(run("two_query_forms.safetensors"), 1,
                {"both 'q_proj.weight' and 'q_a_proj.weight'"});
}

// A Hugging Face shard as transformers writes one: every layer's tensors under its
// prefix, bfloat16 (and one float16), __metadata__ {"format": "pt"}. --prefix reads
// one layer, widened to float32: the output of the same layer's float32 file. Without
// it the first foreign name says which prefix to give.
TEST_F(MhaRun, ReadsOneLayerOfABf16CheckpointByItsPrefix) {
  const auto bf16 = [](float x) {  // round to nearest even, as torch does
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  };
  const auto widened = [](uint16_t h) {
    const uint32_t bits = uint32_t{h} << 16;
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  };
  std::string header = R"({"__metadata__":{"format":"pt"})", data;
  std::vector<float> layer1(4 * 16);  // q, k, v, o of layer 1, as widened
  const char* names[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
  for (int layer = 0; layer < 3; ++layer) {
    for (int part = 0; part < 4; ++part) {
      const std::vector<float> w = RandomFloats(16, 10 * layer + part);
      const bool half = layer == 1 && part == 3;  // one F16 tensor among BF16 ones
      for (int i = 0; i < 16; ++i) {
        uint16_t stored = bf16(w[i]);
        if (half) {  // 0.5 + i / 128: exact in float16 (exponent 14, mantissa i * 16)
          stored = static_cast<uint16_t>((14 << 10) | (i * 16));
        }
        data += Bytes(&stored, 2);
        if (layer == 1)
          layer1[part * 16 + i] = half ? 0.5f + i / 128.0f : widened(stored);
      }
      header += ",\"model.layers." + std::to_string(layer) + ".self_attn." + names[part] +
                ".weight\":{\"dtype\":\"" + (half ? "F16" : "BF16") +
                "\",\"shape\":[4,4],\"data_offsets\":[" +
                std::to_string(data.size() - 32) + "," + std::to_string(data.size()) +
                "]}";
    }
  }
  const std::string shard = Safetensors("shard.safetensors", header + "}", data);
  std::string plain_header = "{", plain_data;
  for (int part = 0; part < 4; ++part) {
    plain_data += Bytes(&layer1[part * 16], 64);
    plain_header += std::string(part ? "," : "") + "\"" + names[part] +
                    ".weight\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[" +
                    std::to_string(64 * part) + "," + std::to_string(64 * part + 64) +
                    "]}";
  }
  const std::string plain =
      Safetensors("plain.safetensors", plain_header + "}", plain_data);
  ASSERT_EQ(Run(Args(plain, query_)).first, 0);
  const io::Array expected = io::ReadNpy(output_);
  std::vector<std::string> args = Args(shard, query_);
  args.insert(args.end(), {"--prefix", "model.layers.1.self_attn."});
  const auto [code, err] = Run(args);
  ASSERT_EQ(code, 0) << err;
  EXPECT_EQ(io::ReadNpy(output_).bytes, expected.bytes);
  ExpectFailure(Args(shard, query_), 1,
                {"model.layers.0.self_attn.k_proj.weight' is a checkpoint's name",
                 "give its prefix 'model.layers.0.self_attn.'"});
  args.back() = "model.layers.7.";
  ExpectFailure(args, 1, {"no tensor's name starts with the prefix 'model.layers.7.'"});
}

// Messages quote what a file or flag gave, made printable; a folder is named as one.
TEST_F(MhaRun, MessagesNameWhatTheyWereGiven) {
  const std::vector<float> w(16, 0.5f);
  const std::string escape =
      Safetensors("escape.safetensors",
                  "{\"\\u001b[31mq_proj.weight\":{\"dtype\":\"F32\",\"shape\":[4,4],"
                  "\"data_offsets\":[0,64]}}",
                  Bytes(w.data(), 64));
  const auto [code, err] = Run(Args(escape, query_));
  EXPECT_EQ(code, 1);
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << err;
  EXPECT_NE(err.find("'\\x1b[31mq_proj.weight'"), std::string::npos) << err;
  const std::string folder = TempPath("a_folder");
  fs::create_directories(folder);
  ExpectFailure(Args(folder, query_), 1, {folder, "is a directory"});
  ExpectFailure(with_args({"--softcap", "1e-300"}), 2,
                {"--softcap: '1e-300' is outside float32's range (it would be 0)"});
  ExpectFailure(with_args({"--scale", "1e39"}), 2,
                {"--scale: '1e39' is outside float32's range (it would be infinite)"});
  ExpectFailure(with_args({"--cache", "paged", "--block-size", "9223372036854775807"}), 1,
                {"block_size", "9223372036854775807"});
}

TEST_F(MhaRun, MissingFile) {
  ExpectFailure(Args(TempPath("nope.safetensors"), query_), 1,
                {"nope.safetensors", "cannot open"});
}

TEST_F(MhaRun, TruncatedNpy) {
  const std::string bytes = [&] {
    std::ifstream in(query_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  ExpectFailure(Args(weights_, WriteFile("trunc.npy", bytes.substr(0, bytes.size() - 5))),
                1, {"trunc.npy", "43 bytes", "needs 48"});
  ExpectFailure(Args(weights_, WriteFile("short.npy", bytes.substr(0, 9))), 1,
                {"short.npy", "truncated"});
  ExpectFailure(Args(weights_, WriteFile("magic.npy", "PK\x03\x04 not numpy")), 1,
                {"magic.npy", "bad magic"});
}

TEST_F(MhaRun, NpyWrongDtypeAndLayout) {
  const std::string data(96, '\0');
  ExpectFailure(Args(weights_, NpyWithHeader("f8.npy",
                                             "{'descr': '<f8', 'fortran_order': False, "
                                             "'shape': (1, 3, 4), }",
                                             data)),
                1, {"f8.npy", "'<f8'"});
  ExpectFailure(Args(weights_, NpyWithHeader("fortran.npy",
                                             "{'descr': '<f4', 'fortran_order': True, "
                                             "'shape': (1, 3, 4), }",
                                             data.substr(0, 48))),
                1, {"fortran_order"});
  ExpectFailure(Args(weights_, NpyWithHeader("neg.npy",
                                             "{'descr': '<f4', 'fortran_order': False, "
                                             "'shape': (1, -3, 4), }",
                                             data)),
                1, {"neg.npy", "expected a non-negative integer"});
}

TEST_F(MhaRun, QueryShapeDoesNotFitWeights) {
  const std::vector<float> q(15);
  const std::string path = TempPath("q5.npy");
  io::WriteNpy(path, q.data(), Shape{1, 3, 5});
  ExpectFailure(Args(weights_, path), 1, {"--query", "[B, S, 4]", "[1, 3, 5]"});
}

// Shapes are checked before anything is sized from them: a header-only file cannot
// make mha-run allocate (the resident set grows by less than 64 MiB).
TEST_F(MhaRun, MalformedShapesFailBeforeAllocating) {
  const long resident_before = MaxResidentKiB();
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
  ExpectFailure(Args(weights_, NpyWithHeader("wide.npy", f4 + "(1, 16777216, 0), }", "")),
                1, {"--query", "[1, 16777216, 0]"});
  std::vector<std::string> args = Args(
      weights_,
      NpyWithHeader("long.npy", f4 + "(1, 6000, 1), }", std::string(6000 * 4, '\0')));
  args.insert(args.end(), {"--attn-weights", TempPath("weights.npy")});
  ExpectFailure(args, 1, {"--query", "[1, 6000, 1]"});
  EXPECT_LT(MaxResidentKiB() - resident_before, 64 * 1024);
}

// A zero-size array is a shape error, never taken for an absent one.
TEST_F(MhaRun, ZeroSizeArraysAreShapeErrors) {
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
  std::vector<std::string> args = Args(weights_, query_);
  args.insert(args.end(),
              {"--key", NpyWithHeader("key.npy", f4 + "(1, 0, 4), }", ""), "--value",
               NpyWithHeader("value.npy", f4 + "(1, 0, 4), }", "")});
  ExpectFailure(args, 1, {"--key", "[1, 0, 4]"});
  args = Args(weights_, query_);
  args.insert(args.end(),
              {"--attn-mask", NpyWithHeader("mask.npy", f4 + "(0, 5), }", "")});
  ExpectFailure(args, 1, {"attn_mask", "[0, 5]"});
}

TEST_F(MhaRun, SafetensorsHeaderOutOfRange) {
  const uint64_t huge = uint64_t{1} << 40;
  ExpectFailure(Args(WriteFile("huge.safetensors", Bytes(&huge, 8) + "{}"), query_), 1,
                {"huge.safetensors", "header length 1099511627776 exceeds the file"});
  ExpectFailure(Args(WriteFile("tiny.safetensors", "abc"), query_), 1, {"truncated"});
  ExpectFailure(Args(Safetensors("json.safetensors", "{not json", ""), query_), 1,
                {"header is not valid JSON"});
}

TEST_F(MhaRun, SafetensorsTensorOffsets) {
  const std::string data(192, '\0');
  ExpectFailure(
      Args(
          Safetensors(
              "range.safetensors",
              R"({"in_proj_weight":{"dtype":"F32","shape":[12,4],"data_offsets":[0,400]}})",
              data),
          query_),
      1, {"in_proj_weight", "[0, 400] out of range", "192 bytes"});
  ExpectFailure(
      Args(
          Safetensors(
              "count.safetensors",
              R"({"in_proj_weight":{"dtype":"F32","shape":[12,4],"data_offsets":[0,100]}})",
              data),
          query_),
      1, {"in_proj_weight", "100 bytes", "needs 192"});
  ExpectFailure(
      Args(
          Safetensors(
              "f64.safetensors",
              R"({"in_proj_weight":{"dtype":"F64","shape":[12,2],"data_offsets":[0,192]}})",
              data),
          query_),
      1, {"unsupported dtype F64"});
  ExpectFailure(
      Args(Safetensors("names.safetensors",
                       R"({"other":{"dtype":"F32","shape":[48],"data_offsets":[0,192]}})",
                       data),
           query_),
      1, {"unknown tensor 'other'"});
  ExpectFailure(
      Args(Safetensors("sinks_only.safetensors",
                       R"({"sinks":{"dtype":"F32","shape":[48],"data_offsets":[0,192]}})",
                       data),
           query_),
      1, {"no in_proj_weight, q_proj_weight or q_proj.weight"});
}

TEST_F(MhaRun, HeadsMustDivideModelWidth) {
  ExpectFailure(
      {"--weights", weights_, "--num-heads", "3", "--query", query_, "--output", output_},
      1, {"num_heads: expected a divisor of the query projection's 4 rows", "got 3"});
}

}  // namespace
}  // namespace mha::testing

// The .npy and safetensors readers accept what numpy and the safetensors format
// accept and refuse the rest with a message naming the file and the fault: headers
// parsed as the literals they are, names unique, byte ranges tiling the data, sizes
// bounded before anything is allocated, raw bytes never echoed.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "src/io/npy.h"
#include "src/io/safetensors.h"
#include "src/io/state_dict.h"

namespace mha::io {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& c : test) c = c == '/' ? '_' : c;  // parameterised names hold a '/'
  return (fs::path(::testing::TempDir()) / ("file_formats_" + test + "_" + name))
      .string();
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// An .npy file (version 1) with this header dict and `data_bytes` zero bytes.
std::string Npy(const std::string& dict, size_t data_bytes) {
  std::string header = dict;
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  const uint16_t length = static_cast<uint16_t>(header.size());
  std::string file("\x93NUMPY\x01\x00", 8);
  file.append(reinterpret_cast<const char*>(&length), 2);
  return WriteFile("array.npy", file + header + std::string(data_bytes, '\0'));
}

// The FileError message of `run`, or "" with a test failure when it succeeds.
template <class F>
std::string ErrorOf(const F& run) {
  try {
    run();
  } catch (const FileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

struct NpyCase {
  const char* name;
  std::string dict;
  size_t data_bytes;
  Shape shape;  // expected when `refused` is empty
  const char* refused = "";
};

void PrintTo(const NpyCase& c, std::ostream* os) { *os << c.name; }

class NpyHeaders : public ::testing::TestWithParam<NpyCase> {};

TEST_P(NpyHeaders, ReadAsNumpyWould) {
  const NpyCase& c = GetParam();
  const std::string path = Npy(c.dict, c.data_bytes);
  if (*c.refused == '\0') {
    EXPECT_EQ(ReadNpy(path).shape, c.shape);
    return;
  }
  const std::string message = ErrorOf([&] { ReadNpy(path); });
  EXPECT_NE(message.find(c.refused), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

const char kF4[] = "{'descr': '<f4', 'fortran_order': False, 'shape': ";

INSTANTIATE_TEST_SUITE_P(
    Cases, NpyHeaders,
    ::testing::Values(
        NpyCase{"numpy_spacing", std::string(kF4) + "(2, 5, 16), }", 640, {2, 5, 16}},
        NpyCase{"no_spaces",
                "{'descr':'<f4','fortran_order':False,'shape':(2,5,16)}",
                640,
                {2, 5, 16}},
        NpyCase{"double_quotes",
                "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3,)}",
                12,
                {3}},
        NpyCase{"scalar", std::string(kF4) + "()}", 4, {}},
        NpyCase{"repeated_shape_keeps_the_last",
                std::string(kF4) + "(7,), 'shape': (2, 3)}",
                24,
                {2, 3}},
        NpyCase{"fortran_order_without_space",
                "{'descr':'<f4','fortran_order':True,'shape':(2,3)}",
                24,
                {},
                "fortran_order"},
        NpyCase{"no_fortran_order",
                "{'descr': '<f4', 'shape': (2, 3)}",
                24,
                {},
                "no 'fortran_order'"},
        NpyCase{"fortran_order_as_text",
                "{'descr': '<f4', 'fortran_order': 'False', 'shape': (2, 3)}",
                24,
                {},
                "'fortran_order' has the wrong type"},
        NpyCase{"float_dimension",
                std::string(kF4) + "(2.9, 5, 16)}",
                640,
                {},
                "expected a non-negative integer"},
        NpyCase{"letters_in_dimension",
                std::string(kF4) + "(2abc, 5, 16)}",
                640,
                {},
                "expected a non-negative integer"},
        NpyCase{"negative_dimension",
                std::string(kF4) + "(1, -3, 4)}",
                48,
                {},
                "expected a non-negative integer"},
        NpyCase{"int_not_tuple", std::string(kF4) + "(5)}", 20, {}, "not a tuple"},
        NpyCase{"extra_key",
                std::string(kF4) + "(5,), 'order': 'C'}",
                20,
                {},
                "unexpected key 'order'"},
        NpyCase{"text_after_dict",
                std::string(kF4) + "(5,)} x",
                20,
                {},
                "unexpected text after the dict"},
        NpyCase{"huge_dimension",
                std::string(kF4) + "(99999999999999999999,)}",
                0,
                {},
                "dimension too large"},
        NpyCase{"control_bytes_quoted", std::string(kF4) + "(5,\x01)}", 20, {}, "\\x01"},
        NpyCase{"rank_five",
                std::string(kF4) + "(1, 1, 1, 1, 1)}",
                4,
                {},
                "rank 5 exceeds 4"}),
    [](const auto& info) { return std::string(info.param.name); });

// A safetensors file from a JSON header and raw data.
std::string Safetensors(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  std::string file(reinterpret_cast<const char*>(&length), 8);
  return WriteFile("tensors.safetensors", file + header + data);
}

std::string Entry(const std::string& name, const std::string& shape, int begin, int end) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(Safetensors, ReadsTensorsThatTileTheData) {
  const std::string path =
      Safetensors("{\"__metadata__\":{\"format\":\"pt\"}," + Entry("a", "[2]", 0, 8) +
                      "," + Entry("b", "[3]", 8, 20) + "}",
                  std::string(20, '\0'));
  const io::Safetensors file = io::Safetensors::Read(path);
  EXPECT_EQ(file.Find("a").shape, Shape{2});
  EXPECT_EQ(file.Find("b").shape, Shape{3});
}

TEST(Safetensors, RefusesWhatTheFormatForbids) {
  const std::string data(20, '\0');
  const auto refused = [&](const std::string& header, const std::string& part,
                           const std::string& bytes) {
    const std::string path = Safetensors(header, bytes);
    const std::string message = ErrorOf([&] { io::Safetensors::Read(path); });
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  refused("{" + Entry("a", "[2]", 0, 8) + "," + Entry("a", "[3]", 8, 20) + "}",
          "tensor 'a' appears twice", data);
  refused("{" + Entry("a", "[3]", 0, 12) + "," + Entry("b", "[2]", 4, 12) + "}",
          "overlap at byte 4", std::string(12, '\0'));
  refused("{" + Entry("a", "[2]", 0, 8) + "," + Entry("b", "[2]", 12, 20) + "}",
          "data bytes [8, 12) belong to no tensor", data);
  refused("{" + Entry("a", "[2]", 0, 8) + "}", "data bytes [8, 20) belong to no tensor",
          data);
  refused("{not json", "header is not valid JSON", "");
  // Found by the fuzzer: a number too large for a double escaped as an uncaught
  // nlohmann::json::out_of_range.
  refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[304E320],\"data_offsets\":[0,4]}}",
          "header is not valid JSON", std::string(4, '\0'));
  refused("[1, 2]", "header is not a JSON object", "");
  refused("{\"a\":\"\xff\xfe\"}", "header is not valid JSON", "");
  refused("{\"a\\u0001\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
          "tensor 'a\\x01' has unsupported dtype F64", std::string(8, '\0'));
  refused(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551615],"
      "\"data_offsets\":[0,4]}}",
      "dimension 18446744073709551615 is too large", std::string(4, '\0'));
  refused("{\"__metadata__\":{\"n\":1}}", "__metadata__ 'n' is not a string", "");
  refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[[[1]]],\"data_offsets\":[0,4]}}",
          "nests deeper than 3", std::string(4, '\0'));
}

// What WriteSafetensors writes reads back as it was; a refused tensor leaves the file
// at the path as it was, and no partial file beside it.
TEST(Safetensors, WrittenTensorsReadBackAndARefusedWriteChangesNothing) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f}, b = {42.0f};
  const std::string path = TempPath("written.safetensors");
  io::WriteSafetensors(path, {{"weight", TensorView(a.data(), Shape{2, 3})},
                              {"bias", TensorView(b.data(), Shape{1})}});
  const io::Safetensors file = io::Safetensors::Read(path);
  ASSERT_EQ(file.Find("weight").shape, (Shape{2, 3}));
  EXPECT_EQ(0, std::memcmp(file.Find("weight").data, a.data(), sizeof(float) * a.size()));
  EXPECT_EQ(*static_cast<const float*>(file.Find("bias").data), 42.0f);

  const std::vector<uint16_t> halves(2);
  const std::string message = ErrorOf([&] {
    io::WriteSafetensors(path,
                         {{"other", TensorView(a.data(), Shape{6})},
                          {"h", TensorView(halves.data(), DType::kBFloat16, Shape{2})}});
  });
  EXPECT_NE(message.find("tensor 'h' is bfloat16, expected dense float32"),
            std::string::npos)
      << message;
  EXPECT_TRUE(io::Safetensors::Read(path).Has("weight"));
  EXPECT_FALSE(fs::exists(path + ".partial"));
  const std::string unwritable = TempPath("no_such_directory/x.safetensors");
  EXPECT_NE(ErrorOf([&] {
              io::WriteSafetensors(unwritable, {{"a", TensorView(a.data(), Shape{6})}});
            }).find("cannot create"),
            std::string::npos);
}

// A shard's other tensors are never read: a 1 GiB tensor (a sparse file: no disk)
// beside the layer under the prefix leaves the peak memory near where it was (the
// whole file was read, three times over, before its names were checked).
TEST(Safetensors, APrefixReadsOnlyItsTensors) {
  constexpr uint64_t kBig = uint64_t{1} << 30;
  const std::string header =
      "{\"other.big\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(kBig / 4) +
      "],\"data_offsets\":[0," + std::to_string(kBig) +
      "]},\"layer.q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" +
      std::to_string(kBig) + "," + std::to_string(kBig + 8) + "]}}";
  const std::string path = Safetensors(header, "");
  const float q[2] = {1.5f, -2.0f};
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(8 + header.size() + kBig));
    file.write(reinterpret_cast<const char*>(q), sizeof q);
  }
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const io::Safetensors file = io::Safetensors::Read(path, "layer.");
  getrusage(RUSAGE_SELF, &after);
  fs::remove(path);
  EXPECT_EQ(file.Names(), std::vector<std::string>{"q"});
  EXPECT_EQ(std::memcmp(file.Find("q").data, q, sizeof q), 0);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 << 10) << "KiB more at the peak";
}

// A header of nested brackets costs the parser memory per level: refused by its
// depth without building it, and past the size cap without parsing at all.
TEST(Safetensors, DeepOrHugeHeadersAreRefusedCheaply) {
  const std::string path = Safetensors(std::string(1 << 20, '['), "");
  EXPECT_NE(ErrorOf([&] { io::Safetensors::Read(path); }).find("nests deeper than 3"),
            std::string::npos);
  const std::string huge = Safetensors(std::string((16 << 20) + 1, ' '), "");
  EXPECT_NE(ErrorOf([&] { io::Safetensors::Read(huge); }).find("exceeds the limit"),
            std::string::npos);
}

}  // namespace
// State-dict names: Hugging Face's o_proj is the output projection (a Llama layer
// without it would silently have none); a name the layer does not read is refused,
// naming it, and so is an ambiguous out_proj beside o_proj.
TEST(StateDictNames, HuggingFaceOutputIsReadAndUnknownNamesAreRefused) {
  const std::vector<float> square(8 * 8, 0.5f);
  const auto layer = [&](const std::vector<std::string>& names) {
    std::map<std::string, mha::TensorView> views;
    for (const std::string& name : names) {
      views[name] = mha::TensorView(square.data(), mha::Shape{8, 8});
    }
    return mha::io::LayerFromStateDict(
        [&views](const std::string& name) {
          const auto found = views.find(name);
          return found == views.end() ? mha::TensorView() : found->second;
        },
        names, "dict", 2);
  };
  const mha::io::LayerFromNames llama =
      layer({"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"});
  EXPECT_TRUE(llama.weights.output.weight.present());
  EXPECT_EQ(
      ErrorOf([&] {
        layer({"q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.wieght"});
      }).find("dict: unknown tensor 'out_proj.wieght'"),
      0u);
  EXPECT_NE(ErrorOf([&] {
              layer({"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                     "out_proj.weight"});
            }).find("ambiguous"),
            std::string::npos);
}

}  // namespace mha::io

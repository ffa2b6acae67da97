// libFuzzer target: mha-run's whole pipeline, files and flags. Input: a flags byte, a
// 2-byte little-endian length L, L bytes of safetensors weights, then the query .npy
// (an optional mask .npy after it when flags ask, split by a second length).
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "tools/mha_run/cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mha::fuzz::FuzzInput input(data, size);
  const uint8_t flags = input.Byte();
  const auto length = [&] { return size_t{input.Byte()} | size_t{input.Byte()} << 8; };
  const std::string weights =
      mha::fuzz::WriteTemp("w.safetensors", input.Bytes(length()));
  const bool masked = flags & 16;
  const std::string query =
      mha::fuzz::WriteTemp("q.npy", masked ? input.Bytes(length()) : input.Rest());
  std::vector<std::string> args = {
      "--weights", weights, "--num-heads", std::to_string(1 + flags % 4),
      "--query",   query,   "--output",    mha::fuzz::WriteTemp("out.npy", ""),
      "--threads", "1"};
  if (flags & 4) args.push_back("--causal");
  if (flags & 8) {
    args.insert(args.end(), {"--attn-weights", mha::fuzz::WriteTemp("a.npy", "")});
  }
  if (masked) {
    args.insert(args.end(), {flags & 32 ? "--key-padding-mask" : "--attn-mask",
                             mha::fuzz::WriteTemp("m.npy", input.Rest())});
  }
  if (flags & 64) args.insert(args.end(), {"--sliding-window", "2"});
  if (flags & 128) args.push_back("--average-heads");
  std::ostringstream err;
  mha::cli::RunMhaCli(args, err);
  return 0;
}

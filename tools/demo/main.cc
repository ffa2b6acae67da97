// mha-demo: runs attention on a built-in problem (BERT-base: B=1, S=128, E=768,
// 12 heads, key padding) and compares speed and results with the naive baseline.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mha/mha.hpp"

namespace {

std::vector<float> Random(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

template <class F>
double MedianSeconds(int repeats, const F& run) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 1, seq = 128, embed = 768, heads = 12;
  int repeats = 20;
  try {
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      const int64_t value = std::atoll(argv[i + 1]);
      if (flag == "--isa") mha::SetMaxIsa(mha::ParseIsa(argv[i + 1], "--isa"));
      if (flag == "--batch") batch = value;
      if (flag == "--seq") seq = value;
      if (flag == "--embed") embed = value;
      if (flag == "--heads") heads = value;
      if (flag == "--repeats") repeats = static_cast<int>(value);
    }
    const float init = 1.0f / std::sqrt(static_cast<float>(embed));
    const std::vector<float> in_proj = Random(3 * embed * embed, 1, init),
                             in_bias = Random(3 * embed, 2, 0.1f),
                             out_proj = Random(embed * embed, 3, init),
                             out_bias = Random(embed, 4, 0.1f),
                             x = Random(batch * seq * embed, 5, 1.0f);
    const mha::AttentionWeights weights =
        mha::FromPackedInProjection({in_proj.data(), mha::Shape{3 * embed, embed}},
                                    {in_bias.data(), mha::Shape{3 * embed}},
                                    {out_proj.data(), mha::Shape{embed, embed}},
                                    {out_bias.data(), mha::Shape{embed}});
    mha::AttentionConfig config;
    config.num_heads = heads;
    config.head_dim = embed / heads;
    config.query_dim = embed;
    // The last 20% of every sequence is padding.
    std::vector<int64_t> lengths(batch, seq - seq / 5);
    mha::AttentionMasks masks;
    masks.key_lengths = {lengths.data(), mha::DType::kInt64, mha::Shape{batch}};

    const mha::MultiheadAttention attention(config, weights);
    const mha::Shape shape{batch, seq, embed};
    std::vector<float> fast(batch * seq * embed), naive(fast.size());
    const mha::AttentionInputs inputs{{x.data(), shape}, {}, {}};
    const double fast_s = MedianSeconds(repeats, [&] {
      attention.Forward(inputs, masks, {{fast.data(), shape}, {}});
    });
    const double naive_s = MedianSeconds(std::max(1, repeats / 10), [&] {
      mha::NaiveMultiheadAttention(config, weights, inputs, masks,
                                   {{naive.data(), shape}, {}});
    });
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < fast.size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(fast[i] - naive[i])));
      max_ref = std::max(max_ref, double(std::fabs(naive[i])));
    }
    std::printf("mha-demo: B=%lld S=%lld E=%lld heads=%lld, key padding 20%%\n",
                (long long)batch, (long long)seq, (long long)embed, (long long)heads);
    std::printf("  mha forward    %10.3f ms (median of %d)\n", fast_s * 1e3, repeats);
    std::printf("  naive baseline %10.3f ms (median of %d)\n", naive_s * 1e3,
                std::max(1, repeats / 10));
    std::printf("  speedup        %10.1fx\n", naive_s / fast_s);
    std::printf("  max |mha - naive| = %.3g (max |naive| = %.3g)\n", max_diff, max_ref);
    const mha::IsaReport isa = mha::DescribeIsa();
    std::string kernels;
    for (const std::string& kernel : isa.projection_kernels) kernels += " " + kernel;
    std::printf("  SIMD target %s, oneDNN ISA %s, projection kernels:%s\n",
                isa.simd_target.c_str(), isa.onednn_isa.c_str(), kernels.c_str());
    return max_diff <= 1e-4 * std::max(1.0, max_ref) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mha-demo: error: %s\n", e.what());
    return 1;
  }
}

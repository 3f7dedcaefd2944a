// Small synthetic digit sets, so worker and job tests run without the MNIST download:
// 28x28 gray images of 10 classes where class c lights rows [2c, 2c+3) with noise, which an
// MLP learns in a few epochs. MakeDigits gives them in memory (for tests that write them in
// another format); WriteDigits writes the same set as real MNIST IDX files.
#ifndef TESSERA_TESTS_WORKER_SYNTHETIC_DIGITS_H_
#define TESSERA_TESTS_WORKER_SYNTHETIC_DIGITS_H_

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace tessera::testing {

inline constexpr int kDigitSide = 28;
inline constexpr int kDigitPixels = kDigitSide * kDigitSide;

struct Digits {
  std::vector<uint8_t> pixels;  // image i is [i * kDigitPixels, (i + 1) * kDigitPixels), rows
  std::vector<uint8_t> labels;  // 0..9
};

// `n` images and their labels, from `seed`.
inline Digits MakeDigits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  Digits d;
  d.pixels.reserve(static_cast<size_t>(n) * kDigitPixels);
  d.labels.reserve(n);
  for (int i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % 10);
    d.labels.push_back(static_cast<uint8_t>(c));
    for (int r = 0; r < kDigitSide; ++r) {
      for (int col = 0; col < kDigitSide; ++col) {
        const bool on = r >= 2 * c && r < 2 * c + 3;
        d.pixels.push_back(static_cast<uint8_t>(on ? 200 + rng() % 56 : rng() % 40));
      }
    }
  }
  return d;
}

inline void WriteBigEndian(std::ofstream& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out.write(bytes, 4);
}

// MakeDigits(n, seed) as IDX files.
inline void WriteDigits(const std::string& images, const std::string& labels, int n,
                        uint32_t seed) {
  const Digits d = MakeDigits(n, seed);
  std::ofstream img(images, std::ios::binary), lab(labels, std::ios::binary);
  WriteBigEndian(img, 0x803);
  WriteBigEndian(img, n);
  WriteBigEndian(img, kDigitSide);
  WriteBigEndian(img, kDigitSide);
  WriteBigEndian(lab, 0x801);
  WriteBigEndian(lab, n);
  img.write(reinterpret_cast<const char*>(d.pixels.data()),
            static_cast<std::streamsize>(d.pixels.size()));
  lab.write(reinterpret_cast<const char*>(d.labels.data()),
            static_cast<std::streamsize>(d.labels.size()));
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_SYNTHETIC_DIGITS_H_

// Small synthetic digit sets as real MNIST IDX files, so worker and job tests run without
// the MNIST download: 28x28 images of 10 classes where class c lights rows [2c, 2c+3) with
// noise, which an MLP learns in a few epochs.
#ifndef TESSERA_TESTS_WORKER_SYNTHETIC_DIGITS_H_
#define TESSERA_TESTS_WORKER_SYNTHETIC_DIGITS_H_

#include <cstdint>
#include <fstream>
#include <random>
#include <string>

namespace tessera::testing {

inline void WriteBigEndian(std::ofstream& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out.write(bytes, 4);
}

// `n` images and their labels, from `seed`.
inline void WriteDigits(const std::string& images, const std::string& labels, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream img(images, std::ios::binary), lab(labels, std::ios::binary);
  WriteBigEndian(img, 0x803);
  WriteBigEndian(img, n);
  WriteBigEndian(img, 28);
  WriteBigEndian(img, 28);
  WriteBigEndian(lab, 0x801);
  WriteBigEndian(lab, n);
  for (int i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % 10);
    lab.put(static_cast<char>(c));
    for (int r = 0; r < 28; ++r) {
      for (int col = 0; col < 28; ++col) {
        const bool on = r >= 2 * c && r < 2 * c + 3;
        img.put(static_cast<char>(on ? 200 + rng() % 56 : rng() % 40));
      }
    }
  }
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_SYNTHETIC_DIGITS_H_

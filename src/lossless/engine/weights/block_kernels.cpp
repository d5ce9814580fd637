// The int4 product llama.cpp computes for Q4_0 / Q4_1 weights, on AVX-512 VNNI (or AVX2): activations
// rounded to int8 per block of 32 (llama.cpp's Q8_1), 4-bit codes times int8 activations summed in int32
// (vpdpbusd), scaled per block in float32. Built and loaded by block_kernels.py; registered as an operator
// (lossless::q4_linear_avx512 / _avx2) so a torch.compile graph calls it like any aten op.
//
// Layout (block_kernels.pack): rows in groups of 16, one 32-bit lane per row. For group g and block b of 32
// columns, codes[g][b] holds 4 chunks of 64 bytes; in chunk j, row r's 4 bytes t = 0..3 hold column
// 4j + t in the low nibble and column 16 + 4j + t in the high one. One vpdpbusd then adds 4 columns
// of 16 rows. scales[g][b] holds the 16 rows' d, then their m (a weight is d * code + m).
//
// Beside them, attention computed row by row over each row's own cache slot (lossless::rows_attention_<isa>,
// further down), for the continuous batch's decoding rows and prompts run row by row.
//
// The AVX-512 build also has the same product for 8-bit codes (lossless::q8_linear_avx512, Q8_0 weights
// offset by 128: block_kernels.pack8), which the output layer uses (quant.Q8Linear).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kRows = 16, kBlock = 32, kBytes = 256;

struct Activations {  // x [M, K] as int8 per block of 32: x ~= d * q, s = d * sum(q)
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

// One block of 32 activations as float32 (a bfloat16 is the high half of a float32's bits)
#if defined(__AVX512F__)
inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const at::BFloat16* x) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#else
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const at::BFloat16* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

// Block i of 32: its largest magnitude over 127 is d, each value times 1 / d rounded to the nearest integer
// (ties to even, as nearbyint in the default rounding mode), s = d * their sum. Vector code, but every
// figure is the one a scalar loop gets: max and the integer sum are exact, the rest one IEEE operation each.
template <typename T>
void quantize_block(const T* x, int8_t* q, float& d_out, float& s_out) {
#if defined(__AVX512F__)
  const __m512 a = load16(x), b = load16(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.f, inv = d != 0.f ? 1.f / d : 0.f;
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, scale)), qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, scale));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(qb));
  const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
#else
  __m256 v[4];
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; i++) {
    v[i] = load8(x + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  const float amax = *std::max_element(lanes, lanes + 8);
  const float d = amax / 127.f, inv = d != 0.f ? 1.f / d : 0.f;
  const __m256 scale = _mm256_set1_ps(inv);
  alignas(32) int32_t ints[kBlock];
  for (int i = 0; i < 4; i++) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(ints + 8 * i), _mm256_cvtps_epi32(_mm256_mul_ps(v[i], scale)));
  }
  int sum = 0;
  for (int t = 0; t < kBlock; t++) {
    q[t] = static_cast<int8_t>(ints[t]);
    sum += ints[t];
  }
#endif
  d_out = d;
  s_out = d * static_cast<float>(sum);
}

template <typename T>
Activations quantize(const T* x, int64_t m, int64_t k) {
  const int64_t blocks = m * k / kBlock;
  Activations a{std::vector<int8_t>(m * k), std::vector<float>(blocks), std::vector<float>(blocks)};
  at::parallel_for(0, blocks, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) quantize_block(x + i * kBlock, a.q.data() + i * kBlock, a.d[i], a.s[i]);
  });
  return a;
}

// Activation row `row`'s int8 codes for chunk j of block b, 4 bytes each: columns 4j..4j+3 (against the
// low nibbles) and 16+4j..16+4j+3 (against the high ones)
struct Words {
  int32_t low, high;
};

inline Words words(const Activations& a, int64_t row, int64_t k, int64_t b, int j) {
  const int8_t* x = a.q.data() + row * k + b * kBlock + 4 * j;
  Words w;
  std::memcpy(&w.low, x, 4);
  std::memcpy(&w.high, x + 16, 4);
  return w;
}

#if defined(__AVX512VNNI__)
// MR activation rows (one to four) against one group of 16 weight rows -> out[r * ldo + 0..15]. BITS 8: the
// same for 8-bit codes (Q8_0 weights, offset by 128 so that vpdpbusd reads them unsigned), a block of 32
// columns in 8 chunks of 64 bytes, chunk j row r's 4 bytes the columns 4j..4j+3
template <int MR, int BITS>
void group(const Activations& a, int64_t row0, int64_t k, const uint8_t* codes, const float* scales,
           float* out, int64_t ldo) {
  const int64_t blocks = k / kBlock, bytes = kBytes * BITS / 4;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[MR];
  for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b++) {
    // two int32 sums a row (even and odd chunks, or low and high nibbles), added at the block's end: twice
    // the independent chains for vpdpbusd's latency, and the same exact integer sum
    __m512i dot[MR][2];
    for (int r = 0; r < MR; r++) dot[r][0] = dot[r][1] = _mm512_setzero_si512();
    for (int j = 0; j < BITS; j++) {  // 64-byte chunks a block: 4 of nibble pairs, or 8 of bytes
      const __m512i w = _mm512_loadu_si512(codes + b * bytes + j * 64);
      if constexpr (BITS == 4) {
        const __m512i lo = _mm512_and_si512(w, low), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low);
        for (int r = 0; r < MR; r++) {
          const Words x = words(a, row0 + r, k, b, j);
          dot[r][0] = _mm512_dpbusd_epi32(dot[r][0], lo, _mm512_set1_epi32(x.low));
          dot[r][1] = _mm512_dpbusd_epi32(dot[r][1], hi, _mm512_set1_epi32(x.high));
        }
      } else {
        for (int r = 0; r < MR; r++) {
          int32_t x;
          std::memcpy(&x, a.q.data() + (row0 + r) * k + b * kBlock + 4 * j, 4);
          dot[r][j % 2] = _mm512_dpbusd_epi32(dot[r][j % 2], w, _mm512_set1_epi32(x));
        }
      }
    }
    const __m512 d = _mm512_loadu_ps(scales + b * 2 * kRows), m = _mm512_loadu_ps(scales + b * 2 * kRows + kRows);
    for (int r = 0; r < MR; r++) {
      const int64_t i = (row0 + r) * blocks + b;
      const __m512i sum = _mm512_add_epi32(dot[r][0], dot[r][1]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(a.d[i])), acc[r]);
      acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.s[i]), acc[r]);
    }
  }
  for (int r = 0; r < MR; r++) _mm512_storeu_ps(out + r * ldo, acc[r]);
}
#else
// The same on AVX2 without VNNI, llama.cpp's way: vpmaddubsw adds two code x activation products into
// 16 bits (at most 2 * 15 * 127, no saturation), vpmaddwd with ones adds two of those into 32; each
// 64-byte chunk is two halves of 8 rows.
template <int MR, int BITS>
void group(const Activations& a, int64_t row0, int64_t k, const uint8_t* codes, const float* scales,
           float* out, int64_t ldo) {
  static_assert(BITS == 4, "8-bit codes need AVX-512 VNNI");
  const int64_t blocks = k / kBlock;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[MR][2];
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; b++) {
    __m256i dot[MR][2];
    for (int r = 0; r < MR; r++) dot[r][0] = dot[r][1] = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
      for (int h = 0; h < 2; h++) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + b * kBytes + j * 64 + h * 32));
        const __m256i lo = _mm256_and_si256(w, low), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
        for (int r = 0; r < MR; r++) {
          const Words x = words(a, row0 + r, k, b, j);
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(x.low)),
                                             _mm256_maddubs_epi16(hi, _mm256_set1_epi32(x.high)));
          dot[r][h] = _mm256_add_epi32(dot[r][h], _mm256_madd_epi16(p, ones));
        }
      }
    }
    for (int h = 0; h < 2; h++) {
      const __m256 d = _mm256_loadu_ps(scales + b * 2 * kRows + h * 8);
      const __m256 m = _mm256_loadu_ps(scales + b * 2 * kRows + kRows + h * 8);
      for (int r = 0; r < MR; r++) {
        const int64_t i = (row0 + r) * blocks + b;
        const __m256 sum = _mm256_cvtepi32_ps(dot[r][h]);
        acc[r][h] = _mm256_fmadd_ps(sum, _mm256_mul_ps(d, _mm256_set1_ps(a.d[i])), acc[r][h]);
        acc[r][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s[i]), acc[r][h]);
      }
    }
  }
  for (int r = 0; r < MR; r++) {
    _mm256_storeu_ps(out + r * ldo, acc[r][0]);
    _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
  }
}
#endif

// Every activation row against every group of 16 weight rows: the groups split between the threads, each
// group's weights read from memory once and kept in cache while 4 activation rows at a time go by them
template <int BITS>
void rows(const Activations& a, int64_t m, int64_t k, int64_t groups, const uint8_t* codes, const float* scales,
          float* out, int64_t n) {
  const int64_t blocks = k / kBlock, bytes = kBytes * BITS / 4;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
      const uint8_t* c = codes + g * blocks * bytes;
      const float* s = scales + g * blocks * 2 * kRows;
      for (int64_t row0 = 0; row0 < m; row0 += 4) {
        float* o = out + row0 * n + g * kRows;
        switch (std::min<int64_t>(4, m - row0)) {
          case 1: group<1, BITS>(a, row0, k, c, s, o, n); break;
          case 2: group<2, BITS>(a, row0, k, c, s, o, n); break;
          case 3: group<3, BITS>(a, row0, k, c, s, o, n); break;
          default: group<4, BITS>(a, row0, k, c, s, o, n); break;
        }
      }
    }
  });
}

template <int BITS>
at::Tensor linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales) {
  const int64_t bytes = kBytes * BITS / 4;
  TORCH_CHECK(x.dim() == 2 && codes.dim() == 3 && scales.dim() == 4, "q4_linear: x [M, K], codes [G, B, 256 or 512], scales [G, B, 2, 16]");
  TORCH_CHECK(codes.scalar_type() == at::kByte && scales.scalar_type() == at::kFloat, "q4_linear: uint8 codes, float32 scales");
  TORCH_CHECK(codes.size(2) == bytes && codes.is_contiguous() && scales.is_contiguous(), "q4_linear: packed weights expected");
  const int64_t m = x.size(0), k = x.size(1), groups = codes.size(0), n = groups * kRows;
  TORCH_CHECK(k == codes.size(1) * kBlock, "q4_linear: x has ", k, " columns, the weights ", codes.size(1) * kBlock);
  const at::Tensor xc = x.contiguous();
  Activations a;
  if (xc.scalar_type() == at::kBFloat16) {
    a = quantize(xc.data_ptr<at::BFloat16>(), m, k);
  } else {
    TORCH_CHECK(xc.scalar_type() == at::kFloat, "q4_linear: bfloat16 or float32 activations");
    a = quantize(xc.data_ptr<float>(), m, k);
  }
  at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat));
  const uint8_t* c = codes.data_ptr<uint8_t>();
  const float* s = scales.data_ptr<float>();
  float* o = out.data_ptr<float>();
  rows<BITS>(a, m, k, groups, c, s, o, n);
  if (x.scalar_type() == at::kFloat) return out;
  at::Tensor rounded = at::empty({m, n}, x.options());  // each sum rounded once (to nearest, ties to even)
  at::BFloat16* r = rounded.data_ptr<at::BFloat16>();
  for (int64_t i = 0; i < m * n; i++) r[i] = static_cast<at::BFloat16>(o[i]);
  return rounded;
}


// a . b over dim values, each read as float32, in 16 lanes added up in lane order: the same bits wherever
// it is called from (the attention's q . k, the norm's sum of squares). A `#pragma omp simd` reduction
// left the order to the compiler, which vectorized the loop over a row's keys one way for its cache prefix
// and another for a tree node's ancestors: 3 of 200 rows moved when a key was read as an ancestor.
template <typename A, typename B>
inline float lane_dot(const A* a, const B* b, int64_t dim) {
  float lanes[16] = {0.f};
  int64_t d0 = 0;
  for (; d0 + 16 <= dim; d0 += 16) {
    for (int i = 0; i < 16; i++) lanes[i] += static_cast<float>(a[d0 + i]) * static_cast<float>(b[d0 + i]);
  }
  for (int64_t d = d0; d < dim; d++) lanes[d - d0] += static_cast<float>(a[d]) * static_cast<float>(b[d]);
  float sum = 0.f;
  for (int i = 0; i < 16; i++) sum += lanes[i];
  return sum;
}

// ---- attention, row by row (the continuous batch's decoding rows: engine/batch/forward.py) ----------------
//
// Each query row r attends over the keys of its own KV cache slot that it sees: positions 0..seen[r]-1,
// then extra[offsets[r]..offsets[r+1]-1] (a tree node's ancestors), in that order. A row's sums run over its
// keys in that order, in float32, whatever the other rows are: its bits are the same in any batch, at any
// draft length, and as the pending token of a one-token step. Query head g * group + i reads kv head g.
//
// On AVX-512, for head sizes of 64 and 128, the scores and the weighted sum of values are computed 16 keys
// at a time (`scores16`, `weigh_values`) with every figure the one the loop over keys gets: each key's q . k
// is lane_dot's sum - its 16 lanes, then the lanes added up in lane order - done for 16 keys side by side
// (their lanes transposed so that the sums in lane order run down 16 keys at once), and a value's weight is
// added into each sum in key order, as before. One key at a time, the lane sums' 15 dependent additions and
// the accumulators kept in memory made attention 44 ms of a 255-row prompt step's 130-180 (now 16-23).

// e^x for a softmax's x <= 0, the same bits one value at a time and 16 at once (`exp16`), and on every
// machine (not the C library's expf, which differs between versions and which a vector loop cannot call):
// e^x = 2^(k/32) 2^(r/32), k the integer nearest x 32 / ln 2 and r the rest, in double precision: 2^(k/32)
// from a table of 2^(i/32) whose exponent k / 32 adds to, 2^(r/32) a degree-4 polynomial (its truncation
// error 1e-12 of the value, far under a float32's half ulp), each step one IEEE operation, rounded once to
// float32 at the end; 0 below -104, where float32's e^x is 0.
constexpr uint64_t kExpTable[32] = {  // the bits of the nearest double to 2^(i/32), less i << 47
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
constexpr double kExpScale = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kExpShift = 0x1.8p52;  // added and taken away: x rounded to an integer (ties to even)
constexpr double kExpC[4] = {0x1.62e42fefa39efp-6, 0x1.ebfbdff82c58fp-13, 0x1.c6b08d704a0c0p-20, 0x1.3b2ab6fba4e77p-27};
constexpr float kExpLow = -104.f;

inline float exp_neg(float x) {
  if (x < kExpLow) return 0.f;
  const double z = static_cast<double>(x) * kExpScale, shifted = z + kExpShift, r = z - (shifted - kExpShift);
  uint64_t k;
  std::memcpy(&k, &shifted, 8);  // k in its low bits: k << 47 adds k / 32 to the exponent
  const uint64_t bits = kExpTable[k % 32] + (k << 47);
  double scale;
  std::memcpy(&scale, &bits, 8);
  double p = kExpC[3] * r + kExpC[2];
  p = p * r + kExpC[1];
  p = p * r + kExpC[0];
  p = p * r + 1.0;
  return static_cast<float>(p * scale);
}

#if defined(__AVX512F__)
inline __m256 exp8(__m256 x) {  // exp_neg's steps in 8 lanes of double precision
  const __m512d shift = _mm512_set1_pd(kExpShift);
  const __m512d z = _mm512_mul_pd(_mm512_cvtps_pd(x), _mm512_set1_pd(kExpScale)), shifted = _mm512_add_pd(z, shift);
  const __m512d r = _mm512_sub_pd(z, _mm512_sub_pd(shifted, shift));
  const __m512i k = _mm512_castpd_si512(shifted);
  const __m512i at = _mm512_and_si512(k, _mm512_set1_epi64(31));
  const __m512i bits = _mm512_add_epi64(_mm512_i64gather_epi64(at, kExpTable, 8), _mm512_slli_epi64(k, 47));
  __m512d p = _mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(kExpC[3]), r), _mm512_set1_pd(kExpC[2]));
  p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(kExpC[1]));
  p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(kExpC[0]));
  p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0));
  return _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_castsi512_pd(bits)));
}

inline __m512 exp16(__m512 x) {
  const __m256 lo = exp8(_mm512_castps512_ps256(x));
  const __m256 hi = exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  const __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLow), _CMP_LT_OQ), y, _mm512_setzero_ps());
}
#endif

// s[j] <- exp_neg(s[j] - top) for j < n
inline void exp_shifted(float* s, int64_t n, float top) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 t = _mm512_set1_ps(top);
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(s + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), t)));
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(s + j, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), t)));
  }
#else
  for (; j < n; j++) s[j] = exp_neg(s[j] - top);
#endif
}

// each of `heads` rows of n scores -> exp(score - the row's largest), in place; their sums into total
inline void softmax_rows(float* scores, int64_t heads, int64_t n, float* total) {
  for (int64_t i = 0; i < heads; i++) {
    float* si = scores + i * n;
    exp_shifted(si, n, *std::max_element(si, si + n));
    float sum = 0.f;
    for (int64_t j = 0; j < n; j++) sum += si[j];
    total[i] = sum;
  }
}

#if defined(__AVX512F__)
// rows[l] lane j <- rows[j] lane l
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int k = 0; k < 2; k++) {
      const __m512d a = _mm512_castps_pd(t[i + k]), b = _mm512_castps_pd(t[i + k + 2]);
      r[i + 2 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int i = 0; i < 16; i += 8) {
    for (int k = 0; k < 4; k++) {
      t[i + k] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0x88);
      t[i + k + 4] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0xdd);
    }
  }
  for (int k = 0; k < 8; k++) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
    r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
  }
}

// scores[j] = lane_dot(query, key j, 16 * C) * scale for m <= 16 keys, given as float32 rows of 16 * C
template <int C>
inline void scores16(const float* query, const float* keys, int64_t m, float scale, float* scores) {
  __m512 q[C], lanes[16];
  for (int c = 0; c < C; c++) q[c] = _mm512_loadu_ps(query + 16 * c);
  for (int j = 0; j < 16; j++) {
    __m512 acc = _mm512_setzero_ps();
    if (j < m) {
      for (int c = 0; c < C; c++) acc = _mm512_add_ps(acc, _mm512_mul_ps(q[c], _mm512_loadu_ps(keys + (j * C + c) * 16)));
    }
    lanes[j] = acc;
  }
  transpose16(lanes);  // lanes[l]: lane l of each key's sums
  __m512 sum = _mm512_setzero_ps();
  for (int l = 0; l < 16; l++) sum = _mm512_add_ps(sum, lanes[l]);
  _mm512_mask_storeu_ps(scores, static_cast<__mmask16>((1u << m) - 1), _mm512_mul_ps(sum, _mm512_set1_ps(scale)));
}

// acc = sum over the n keys, in key order, of weights[j] * value j (16 * C values each), from zero
template <int C, typename T, typename At>
inline void weigh_values(const float* weights, int64_t n, At value_at, float* acc) {
  __m512 a[C];
  for (int c = 0; c < C; c++) a[c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j++) {
    const __m512 p = _mm512_set1_ps(weights[j]);
    const T* v = value_at(j);
    for (int c = 0; c < C; c++) a[c] = _mm512_add_ps(a[c], _mm512_mul_ps(p, load16(v + 16 * c)));
  }
  for (int c = 0; c < C; c++) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

// One (row, kv head)'s scores and weighted values (acc), with their softmax sums (total), 16 keys at a time
// (C = head size / 16)
template <int C, typename T, typename At>
void attend16(const float* query, int64_t group, int64_t n, At key_at, const T* ks, const T* vs, float scale,
              std::vector<float>& block, std::vector<float>& scores, float* acc, float* total) {
  constexpr int64_t dim = 16 * C;
  block.resize(16 * dim);
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - j0);
    for (int64_t j = 0; j < m; j++) {  // each key read as float32 once for the group's heads
      const T* k = ks + key_at(j0 + j) * dim;
      for (int c = 0; c < C; c++) _mm512_storeu_ps(block.data() + j * dim + 16 * c, load16(k + 16 * c));
    }
    for (int64_t i = 0; i < group; i++) scores16<C>(query + i * dim, block.data(), m, scale, scores.data() + i * n + j0);
  }
  softmax_rows(scores.data(), group, n, total);
  for (int64_t i = 0; i < group; i++) {
    weigh_values<C, T>(scores.data() + i * n, n, [&](int64_t j) { return vs + key_at(j) * dim; }, acc + i * dim);
  }
}
#endif

template <typename T>
void attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const int64_t* slots,
                 const int64_t* seen, const int64_t* offsets, const int64_t* extra, at::Tensor& out) {
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = keys.size(1), positions = keys.size(2), group = heads / kv_heads;
  const T* qs = q.data_ptr<T>();
  const T* ks = keys.data_ptr<T>();
  const T* vs = values.data_ptr<T>();
  T* os = out.data_ptr<T>();
  const float scale = 1.f / std::sqrt(static_cast<float>(dim));
  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    // acc: the group's weighted values, then their softmax sums
    std::vector<float> query(group * dim), key(dim), acc(group * dim + group), scores, block;
    for (int64_t item = begin; item < end; item++) {
      const int64_t r = item / kv_heads, h = item % kv_heads, prefix = seen[r];
      const int64_t n = prefix + offsets[r + 1] - offsets[r];
      const int64_t base = (slots[r] * kv_heads + h) * positions;
      auto key_at = [&](int64_t j) { return base + (j < prefix ? j : extra[offsets[r] + j - prefix]); };
      scores.resize(group * n);
      for (int64_t i = 0; i < group * dim; i++) query[i] = static_cast<float>(qs[(r * heads + h * group) * dim + i]);
      float* total = acc.data() + group * dim;
#if defined(__AVX512F__)
      if (dim == 64) {
        attend16<4>(query.data(), group, n, key_at, ks, vs, scale, block, scores, acc.data(), total);
      } else if (dim == 128) {
        attend16<8>(query.data(), group, n, key_at, ks, vs, scale, block, scores, acc.data(), total);
      } else
#endif
      {
        for (int64_t j = 0; j < n; j++) {
          const T* k = ks + key_at(j) * dim;
          for (int64_t d = 0; d < dim; d++) key[d] = static_cast<float>(k[d]);
          for (int64_t i = 0; i < group; i++) {
            const float* qi = query.data() + i * dim;
            scores[i * n + j] = lane_dot(qi, key.data(), dim) * scale;
          }
        }
        softmax_rows(scores.data(), group, n, total);
        std::fill(acc.begin(), acc.begin() + group * dim, 0.f);
        for (int64_t j = 0; j < n; j++) {
          const T* v = vs + key_at(j) * dim;
          for (int64_t d = 0; d < dim; d++) key[d] = static_cast<float>(v[d]);
          for (int64_t i = 0; i < group; i++) {
            const float p = scores[i * n + j];
            float* ai = acc.data() + i * dim;
            for (int64_t d = 0; d < dim; d++) ai[d] += p * key[d];
          }
        }
      }
      for (int64_t i = 0; i < group; i++) {
        const float inv = 1.f / total[i];
        T* o = os + (r * heads + h * group + i) * dim;
        for (int64_t d = 0; d < dim; d++) o[d] = static_cast<T>(acc[i * dim + d] * inv);
      }
    }
  });
}

at::Tensor rows_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                          const at::Tensor& slots, const at::Tensor& seen, const at::Tensor& offsets,
                          const at::Tensor& extra) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 4 && values.sizes() == keys.sizes(), "rows_attention: q [R, H, D], keys and values [S, Hkv, P, D]");
  TORCH_CHECK(q.size(2) == keys.size(3) && q.size(1) % keys.size(1) == 0, "rows_attention: head shapes disagree");
  TORCH_CHECK(keys.scalar_type() == q.scalar_type() && values.scalar_type() == q.scalar_type(), "rows_attention: q, keys and values of one dtype");
  TORCH_CHECK(keys.is_contiguous() && values.is_contiguous(), "rows_attention: contiguous caches expected");
  const int64_t rows = q.size(0);
  for (const at::Tensor* t : {&slots, &seen, &offsets, &extra}) {
    TORCH_CHECK(t->scalar_type() == at::kLong && t->dim() == 1 && t->is_contiguous(), "rows_attention: int64 indices");
  }
  TORCH_CHECK(slots.size(0) == rows && seen.size(0) == rows && offsets.size(0) == rows + 1, "rows_attention: one slot, seen and offset per row");
  const int64_t* sl = slots.data_ptr<int64_t>();
  const int64_t* se = seen.data_ptr<int64_t>();
  const int64_t* of = offsets.data_ptr<int64_t>();
  const int64_t* ex = extra.data_ptr<int64_t>();
  TORCH_CHECK(of[0] == 0 && of[rows] == extra.size(0), "rows_attention: offsets must span extra");
  for (int64_t r = 0; r < rows; r++) {  // no row reads outside its slot
    TORCH_CHECK(sl[r] >= 0 && sl[r] < keys.size(0) && se[r] >= 0 && se[r] <= keys.size(2), "rows_attention: row ", r, " outside the cache");
    TORCH_CHECK(of[r + 1] >= of[r] && se[r] + of[r + 1] - of[r] > 0, "rows_attention: row ", r, " sees no key");
    for (int64_t e = of[r]; e < of[r + 1]; e++) TORCH_CHECK(ex[e] >= 0 && ex[e] < keys.size(2), "rows_attention: row ", r, " outside the cache");
  }
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty_like(qc);
  if (qc.scalar_type() == at::kBFloat16) {
    attend_rows<at::BFloat16>(qc, keys, values, sl, se, of, ex, out);
  } else {
    TORCH_CHECK(qc.scalar_type() == at::kFloat, "rows_attention: bfloat16 or float32");
    attend_rows<float>(qc, keys, values, sl, se, of, ex, out);
  }
  return out;
}

// x (float32) -> e^x as the attention's softmax computes it (`exp_shifted`), for x <= 0: what the tests hold
// to one bit pattern on every instruction set
at::Tensor softmax_exp(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax_exp: float32");
  at::Tensor out = x.contiguous().clone();
  exp_shifted(out.data_ptr<float>(), out.numel(), 0.f);
  return out;
}

// ---- a layer's row-wise pieces, for the continuous batch's packed rows (engine/batch/forward.py) -------------
//
// Each output row is computed from its own input row alone, in float32, in a fixed order (a sum of squares in
// 16 lanes added up in lane order), and rounded once to the output's dtype: a row's bits are the same in a
// batch of any size and at any place in it. One call replaces the handful of elementwise ops torch would
// run (each rounding to bfloat16 on its own), whose dispatch at a decode step cost more than their work.

template <typename T>
void norm_rows_impl(const at::Tensor& x, const float* w, double eps, at::Tensor& out) {
  const int64_t n = x.size(0), dim = x.size(1);
  const T* xs = x.data_ptr<T>();
  T* os = out.data_ptr<T>();
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
      const T* xr = xs + r * dim;
      const float sum = lane_dot(xr, xr, dim);
      const float inv = 1.f / std::sqrt(sum / static_cast<float>(dim) + static_cast<float>(eps));
      T* o = os + r * dim;
      for (int64_t d = 0; d < dim; d++) o[d] = static_cast<T>(static_cast<float>(xr[d]) * inv * w[d]);
    }
  });
}

// x [N, D] -> x * rsqrt(mean(x^2) + eps) * weight, each row alone
at::Tensor norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 1 && weight.size(0) == x.size(1), "norm_rows: x [N, D], weight [D]");
  const at::Tensor xc = x.contiguous(), w = weight.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(xc);
  if (xc.scalar_type() == at::kBFloat16) {
    norm_rows_impl<at::BFloat16>(xc, w.data_ptr<float>(), eps, out);
  } else {
    TORCH_CHECK(xc.scalar_type() == at::kFloat, "norm_rows: bfloat16 or float32");
    norm_rows_impl<float>(xc, w.data_ptr<float>(), eps, out);
  }
  return out;
}

// One head's row rotated as transformer.apply_rope rotates it (x * cos + rotate_half(x) * sin), in float32
template <typename T, typename R>
inline void rotate(const T* x, const R* cos, const R* sin, int64_t dim, float* out) {
  const int64_t half = dim / 2;
  for (int64_t d = 0; d < half; d++) {
    out[d] = static_cast<float>(x[d]) * static_cast<float>(cos[d]) - static_cast<float>(x[d + half]) * static_cast<float>(sin[d]);
  }
  for (int64_t d = half; d < dim; d++) {
    out[d] = static_cast<float>(x[d]) * static_cast<float>(cos[d]) + static_cast<float>(x[d - half]) * static_cast<float>(sin[d]);
  }
}

template <typename T, typename C>
void rope_rows_impl(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& keys,
                    at::Tensor& values, const int64_t* slots, const int64_t* positions, int64_t heads, at::Tensor& q) {
  const int64_t n = qkv.size(0), width = qkv.size(1), dim = keys.size(3), kv_heads = keys.size(1);
  const int64_t cached = keys.size(2);
  const T* xs = qkv.data_ptr<T>();
  const T* cs = cos.data_ptr<T>();
  const T* ss = sin.data_ptr<T>();
  C* ks = keys.data_ptr<C>();
  C* vs = values.data_ptr<C>();
  T* qs = q.data_ptr<T>();
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> turned(dim);
    for (int64_t r = begin; r < end; r++) {
      const T* x = xs + r * width;
      const T* c = cs + r * dim;
      const T* s = ss + r * dim;
      for (int64_t h = 0; h < heads; h++) {
        rotate(x + h * dim, c, s, dim, turned.data());
        for (int64_t d = 0; d < dim; d++) qs[(r * heads + h) * dim + d] = static_cast<T>(turned[d]);
      }
      for (int64_t h = 0; h < kv_heads; h++) {  // a key is rounded to x's dtype, then to the cache's, as alone
        rotate(x + (heads + h) * dim, c, s, dim, turned.data());
        const T* v = x + (heads + kv_heads + h) * dim;
        const int64_t at = ((slots[r] * kv_heads + h) * cached + positions[r]) * dim;
        for (int64_t d = 0; d < dim; d++) {
          ks[at + d] = static_cast<C>(static_cast<float>(static_cast<T>(turned[d])));
          vs[at + d] = static_cast<C>(static_cast<float>(v[d]));
        }
      }
    }
  });
}

// qkv [N, (H + 2 Hkv) D] (each row its q | k | v heads), cos, sin [N, D] in qkv's dtype: q and k rotated for
// their rows' positions; k and v written to keys, values [S, Hkv, P, D] at (slots[r], :, positions[r]);
// returns q [N, H, D]
at::Tensor rope_rows(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& keys,
                     at::Tensor& values, const at::Tensor& slots, const at::Tensor& positions, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 2 && keys.dim() == 4 && values.sizes() == keys.sizes(), "rope_rows: qkv [N, W], keys and values [S, Hkv, P, D]");
  const int64_t n = qkv.size(0), kv_heads = keys.size(1), dim = keys.size(3);
  TORCH_CHECK(qkv.size(1) == (heads + 2 * kv_heads) * dim && dim % 2 == 0, "rope_rows: qkv's width is not (H + 2 Hkv) D");
  TORCH_CHECK(qkv.is_contiguous() && keys.is_contiguous() && values.is_contiguous(), "rope_rows: contiguous tensors expected");
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.size(0) == n && cos.size(1) == dim, "rope_rows: cos, sin [N, D]");
  TORCH_CHECK(cos.scalar_type() == qkv.scalar_type() && sin.scalar_type() == qkv.scalar_type(), "rope_rows: cos and sin in qkv's dtype");
  TORCH_CHECK(keys.scalar_type() == values.scalar_type(), "rope_rows: keys and values of one dtype");
  for (const at::Tensor* t : {&slots, &positions}) {
    TORCH_CHECK(t->scalar_type() == at::kLong && t->dim() == 1 && t->size(0) == n && t->is_contiguous(), "rope_rows: int64 slots and positions, one a row");
  }
  const int64_t* sl = slots.data_ptr<int64_t>();
  const int64_t* po = positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; r++) {
    TORCH_CHECK(sl[r] >= 0 && sl[r] < keys.size(0) && po[r] >= 0 && po[r] < keys.size(2), "rope_rows: row ", r, " outside the cache");
  }
  const at::Tensor c = cos.contiguous(), s = sin.contiguous();
  at::Tensor q = at::empty({n, heads, dim}, qkv.options());
  const bool bf16 = qkv.scalar_type() == at::kBFloat16, cache16 = keys.scalar_type() == at::kBFloat16;
  TORCH_CHECK(bf16 || qkv.scalar_type() == at::kFloat, "rope_rows: bfloat16 or float32");
  TORCH_CHECK(cache16 || keys.scalar_type() == at::kFloat, "rope_rows: a bfloat16 or float32 cache");
  if (bf16 && cache16) rope_rows_impl<at::BFloat16, at::BFloat16>(qkv, c, s, keys, values, sl, po, heads, q);
  else if (bf16) rope_rows_impl<at::BFloat16, float>(qkv, c, s, keys, values, sl, po, heads, q);
  else if (cache16) rope_rows_impl<float, at::BFloat16>(qkv, c, s, keys, values, sl, po, heads, q);
  else rope_rows_impl<float, float>(qkv, c, s, keys, values, sl, po, heads, q);
  return q;
}

// ---- every layer of a decoding step in one call ---------------------------------------------------------
//
// A step whose rows all go apart (each computed as a one-token step computes it: forward.py's KernelRows)
// runs its layers here: the calls forward_packed makes op by op - norm_rows, the int4 products, rope_rows,
// rows_attention, torch's silu, product and sums - in the same order on the same tensors, so the same bits,
// without a return to Python between them: at one sequence, a step spent more time dispatching a layer's
// twenty-odd ops than computing them.
//
// norms: per layer the attention's and the feed-forward's (float32), then the final one; codes, scales: per
// layer q|k|v, output, gate|up, down (block_kernels.pack); keys, values: per layer [S, Hkv, P, D], written at
// (slots[r], :, positions[r]); the rest as rope_rows and rows_attention take them. Returns the final norm's
// output [N, dim].
at::Tensor decode_layers(const at::Tensor& x0, at::TensorList norms, at::TensorList codes, at::TensorList scales,
                         at::TensorList keys, at::TensorList values, const at::Tensor& cos, const at::Tensor& sin,
                         const at::Tensor& slots, const at::Tensor& positions, const at::Tensor& seen,
                         const at::Tensor& offsets, const at::Tensor& extra, int64_t heads, double eps) {
  const int64_t layers = static_cast<int64_t>(keys.size());
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(values.size()) == layers, "decode_layers: keys and values per layer");
  TORCH_CHECK(static_cast<int64_t>(norms.size()) == 2 * layers + 1, "decode_layers: two norms a layer, then the final one");
  TORCH_CHECK(static_cast<int64_t>(codes.size()) == 4 * layers && scales.size() == codes.size(), "decode_layers: four products a layer");
  TORCH_CHECK(x0.dim() == 2, "decode_layers: x [N, dim]");
  const int64_t n = x0.size(0), dim = x0.size(1), head_dim = keys[0].size(3);
  const int64_t width = (heads + 2 * keys[0].size(1)) * head_dim;
  at::Tensor x = x0.contiguous();
  for (int64_t i = 0; i < layers; i++) {
    at::Tensor k = keys[i], v = values[i];
    const at::TensorList w = codes.slice(4 * i, 4), s = scales.slice(4 * i, 4);
    const at::Tensor qkv = linear<4>(norm_rows(x, norms[2 * i], eps), w[0], s[0]).narrow(1, 0, width).contiguous();
    const at::Tensor y = rows_attention(rope_rows(qkv, cos, sin, k, v, slots, positions, heads), k, v, slots, seen, offsets, extra);
    const at::Tensor h = x + linear<4>(y.view({n, -1}), w[1], s[1]).narrow(1, 0, dim);
    const at::Tensor up = linear<4>(norm_rows(h, norms[2 * i + 1], eps), w[2], s[2]);
    const int64_t hidden = w[3].size(1) * kBlock;  // gate | up, each [N, hidden]
    x = h + linear<4>(at::silu(up.narrow(1, 0, hidden)) * up.narrow(1, hidden, hidden), w[3], s[3]).narrow(1, 0, dim);
  }
  return norm_rows(x, norms[2 * layers], eps);
}

}  // namespace

// Q4_OP names the build (q4_linear_avx512, q4_linear_avx2): both may be loaded in one process. The 8-bit
// product (q8_linear_avx512) is built on AVX-512 VNNI only: AVX2's vpmaddubsw would saturate on 8-bit codes
TORCH_LIBRARY_FRAGMENT(lossless, m) {
  m.def(Q4_OP "(Tensor x, Tensor codes, Tensor scales) -> Tensor");
  m.def(ATTENTION_OP "(Tensor q, Tensor keys, Tensor values, Tensor slots, Tensor seen, Tensor offsets, Tensor extra) -> Tensor");
  m.def(NORM_OP "(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def(EXP_OP "(Tensor x) -> Tensor");
  m.def(ROPE_OP "(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, Tensor slots, Tensor positions, int heads) -> Tensor");
  m.def(LAYERS_OP "(Tensor x, Tensor[] norms, Tensor[] codes, Tensor[] scales, Tensor(a!)[] keys, Tensor(b!)[] values, Tensor cos, Tensor sin, Tensor slots, Tensor positions, Tensor seen, Tensor offsets, Tensor extra, int heads, float eps) -> Tensor");
#if defined(__AVX512VNNI__)
  m.def(Q8_OP "(Tensor x, Tensor codes, Tensor scales) -> Tensor");
#endif
}
TORCH_LIBRARY_IMPL(lossless, CPU, m) {
  m.impl(Q4_OP, linear<4>);
  m.impl(ATTENTION_OP, rows_attention);
  m.impl(NORM_OP, norm_rows);
  m.impl(EXP_OP, softmax_exp);
  m.impl(ROPE_OP, rope_rows);
  m.impl(LAYERS_OP, decode_layers);
#if defined(__AVX512VNNI__)
  m.impl(Q8_OP, linear<8>);
#endif
}

/* test_math.c — the CPU provider's math family through the public API:
 * a table of one-node models (built with ox_test_models.h), each run
 * through a session with hand-computed (or numpy-computed) expectations.
 * Covers the edge cases the ONNX node suite misses: broadcasting (scalars,
 * zero-size dims, rank mismatch, incompatible shapes), empty tensors, Cast
 * overflow/NaN/rounding (float to int, to float8 with and without
 * saturate, to bool, to packed int4, to float16 ties), Max/Min with NaN,
 * integer division/modulo by zero (an error naming the node), Mod's sign
 * rules, old-opset semantics (LogSoftmax coerce-to-2D, PRelu channel
 * slope) and attribute variants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define MAX_IN 3

typedef struct TIn {
  int type;
  int rank;
  int64_t dims[4];
  const void* data;
  size_t bytes; /* strings: count * sizeof(char*) */
} TIn;

typedef enum AttrKind { A_NONE, A_INT, A_FLOAT, A_STRING } AttrKind;
typedef struct TAttr {
  const char* name;
  AttrKind kind;
  int64_t i;
  float f;
  const char* s;
} TAttr;

typedef struct Case {
  const char* desc;
  int opset;
  const char* op;
  TAttr attrs[3];
  int n_in;
  TIn in[MAX_IN];
  int out_type;
  int out_rank;
  int64_t out_dims[4];
  const void* expect; /* NULL with out_count 0: an empty output */
  size_t out_count;   /* elements */
  const char* error;  /* a substring of the expected error; NULL: success */
} Case;

#define F32(r, ...) ONYX_ELEM_FLOAT32, r, __VA_ARGS__
#define ARR(a)      (const void*)(a), sizeof(a)
#define INT(n, v)                                                                                  \
  { n, A_INT, v, 0, NULL }
#define FLT(n, v)                                                                                  \
  { n, A_FLOAT, 0, v, NULL }
#define STR(n, v)                                                                                  \
  { n, A_STRING, 0, 0, v }
#define NOATTR                                                                                     \
  {                                                                                                \
    { NULL, A_NONE, 0, 0, NULL }                                                                   \
  }

/* --- data ------------------------------------------------------------------------------ */
static const float f_2x3[] = {1, 2, 3, 4, 5, 6};
static const float f_scalar[] = {1.5f};
static const float f_2x3_plus[] = {2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f};
static const int32_t i_a21[] = {1, 2};
static const int32_t i_b3[] = {10, 20, 30};
static const int32_t i_a21_b3[] = {11, 21, 31, 12, 22, 32};
static const float f_3[] = {1, 2, 3};
static const float f_4[] = {1, 2, 3, 4};
static const int32_t i_num[] = {7, 8};
static const int32_t i_zero_den[] = {2, 0};
static const int32_t mod_a[] = {-7, 7, -7, 7};
static const int32_t mod_b[] = {3, -3, -3, 3};
static const int32_t mod_py[] = {2, -2, -1, 1}; /* Python's %: divisor's sign */
static const int32_t mod_c[] = {-1, 1, -1, 1};  /* C's %: dividend's sign */
static const float fmod_a[] = {-7.5f, 7.5f};
static const float fmod_b[] = {2, -2};
static const float fmod_c[] = {-1.5f, 1.5f};
#define NANF ((float)NAN)
static const float nan_a[] = {1, NANF, 3};
static const float nan_b[] = {NANF, 2, 1};
static const float max_nan[] = {NANF, NANF, 3};
static const float min_nan[] = {NANF, NANF, 1};
static const float v_a21[] = {1, 5};
static const float v_b13[] = {0, 4, 8};
static const float v_c[] = {3};
static const float v_max3[] = {3, 4, 8, 5, 5, 8};
static const float mean_a[] = {1, 2};
static const float mean_b[] = {3, 6};
static const float mean_ab[] = {2, 4};
static const double d_sum1[] = {1.25, -2.5};
static const float cast_fi_in[] = {1.7f, -1.7f, NANF, 3e9f, -3e9f, 0.5f};
static const int32_t cast_fi_out[] = {1, -1, 0, INT32_MAX, INT32_MIN, 0};
static const float cast_fb_in[] = {0.0f, -0.0f, NANF, 2.0f, -1e-30f};
static const uint8_t cast_fb_out[] = {0, 0, 1, 1, 1};
static const float f8_in[] = {1000.0f, -1000.0f, INFINITY, NANF, 0.3f, -0.0f, 1e-9f};
/* E4M3FN: 448 is the largest finite value (0x7E); S.1111.111 is NaN; 0.3
 * rounds to 1.25 * 2^-2 (exponent field 5, mantissa 2) = 0x2A. */
static const uint8_t f8_sat[] = {0x7E, 0xFE, 0x7E, 0x7F, 0x2A, 0x80, 0x00};
static const uint8_t f8_nosat[] = {0x7F, 0xFF, 0x7F, 0x7F, 0x2A, 0x80, 0x00};
/* E5M2 without saturation: overflow and infinity are infinity (0x7C). */
static const uint8_t e5_nosat[] = {0x64, 0xE4, 0x7C, 0x7E, 0x35, 0x80, 0x00};
/* E4M3FNUZ: NaN is 0x80, no negative zero. */
static const uint8_t fnuz_sat[] = {0x7F, 0xFF, 0x7F, 0x80, 0x32, 0x00, 0x00};
static const uint8_t f8_back_in[] = {0x7E, 0x2A, 0xB8, 0x01};
static const float f8_back_out[] = {448.0f, 0.3125f, -1.0f, 0.001953125f};
/* 1 + 2^-11 is halfway between two float16 values: ties go to even. */
static const float f16_in[] = {1.00048828125f, 1.00146484375f, 65520.0f, -70000.0f};
static const uint16_t f16_out[] = {0x3C00, 0x3C02, 0x7C00, 0xFC00};
static const uint16_t f16_one[] = {0x3C00};
static const float i4_in[] = {1, -1, 7, -8, 9};
static const uint8_t i4_out[] = {0xF1, 0x87, 0x09}; /* low nibble first; 9 wraps to -7 */
static const uint8_t i4_back_in[] = {0xF1, 0x87};
static const int8_t i4_back_out[] = {1, -1, 7, -8};
static const char* const str_in[] = {"1.5", "-inf", "NaN", "42"};
static const float str_out[] = {1.5f, -INFINITY, NANF, 42.0f};
static const float num_for_str[] = {0.5f, -2.0f, 1e20f};
static const char* const num_str[] = {"0.5", "-2", "1e+20"};
static const char* const eq_a[] = {"ab", "", "x"};
static const char* const eq_b[] = {"ab", "", "y"};
static const uint8_t eq_ab[] = {1, 1, 0};
static const int32_t clip_x[] = {-5, 0, 5, 10};
static const int32_t clip_lo[] = {0};
static const int32_t clip_hi[] = {6};
static const int32_t clip_y[] = {0, 0, 5, 6};
static const uint8_t sh_x[] = {16, 4, 1, 255};
static const uint8_t sh_n[] = {1, 2, 9, 4};
static const uint8_t shr_y[] = {8, 1, 0, 15};
static const uint8_t shl_y[] = {32, 16, 0, 240};
static const float ls_x[] = {0, 1, 2, 3};
static const float ls_2d[] = {-3.4401897f, -2.4401897f, -1.4401897f, -0.4401897f};
static const float ls_ax0[] = {-2.12692801f, -2.12692801f, -0.12692801f, -0.12692801f};
static const float hm_x[] = {1, 3, 3, 2, 1, 0};
static const float hm_y[] = {0, 1, 0, 1, 0, 0}; /* the first maximum wins */
static const float inf_x[] = {-INFINITY, INFINITY, 1, NANF};
static const uint8_t inf_pos[] = {0, 1, 0, 0};
static const uint8_t nan_y[] = {0, 0, 0, 1};
static const float gelu_x[] = {-1.5f, 0, 0.5f, 2};
static const float gelu_tanh[] = {-0.10042842f, 0, 0.34571401f, 1.95459769f};
static const float gelu_erf[] = {-0.10021080f, 0, 0.34573123f, 1.95449974f};
static const float selu_x[] = {-2, 0, 3};
static const float selu_y[] = {-1.52016647f, 0, 3.15210296f};
static const float celu_y[] = {-1.26424112f, 0, 3}; /* alpha 2 */
static const float sp_x[] = {-20, 0, 20, 100};
static const float sp_y[] = {2.06115362e-09f, 0.693147181f, 20, 100};
static const int32_t sign_x[] = {-5, 0, 7};
static const int32_t sign_y[] = {-1, 0, 1};
static const float pr_x[] = {-1, -2, -3, 4, -5, 6};
static const float pr_s[] = {0.5f, 1, 2};
static const float pr_y[] = {-0.5f, -2, -6, 4, -5, 6};
static const float div_x[] = {1, -1, 0};
static const float div_z[] = {0, 0, 0};
static const float div_y[] = {INFINITY, -INFINITY, NANF};
static const int32_t pow_b[] = {2, 3, -2};
static const int32_t pow_e[] = {10, 2, 3};
static const int32_t pow_y[] = {1024, 9, -8};
static const uint8_t b_a[] = {1, 1, 0, 0};
static const uint8_t b_b[] = {1, 0, 1, 0};
static const uint8_t b_xor[] = {0, 1, 1, 0};
static const int16_t bw_a[] = {0x0F0F, -1};
static const int16_t bw_b[] = {0x00FF, 0x1234};
static const int16_t bw_and[] = {0x000F, 0x1234};
static const int16_t bw_not[] = {(int16_t)0xF0F0, 0};
static const float bc_in[] = {1.0f};
static const int32_t bc_out[] = {0x3F800000};
static const float round_x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f};
static const float round_y[] = {0, 2, 2, -0.0f, -2};

static const float e8_in[] = {0.124f, 1.1f, 3.0f, INFINITY, NANF};
static const uint8_t e8_up[] = {124, 128, 129, 254, 255};
static const uint8_t e8_down[] = {123, 127, 128, 254, 255};
static const uint8_t e8_near[] = {124, 127, 129, 254, 255};
/* E2M1: 0.25 ties to 0, 1.25 ties to 1.0, 5 ties to 4, -7 saturates, NaN
 * becomes 0x8 (-0, there is no NaN), 0.75 ties up to 1.0 (even mantissa). */
static const float fp4_in[] = {0.25f, 1.25f, 5.0f, -7.0f, NANF, 0.75f};
static const uint8_t fp4_out[] = {0x20, 0xF6, 0x28};
static const uint8_t and_a[] = {1, 1, 1, 1, 0, 1};
static const uint8_t and_b[] = {1, 0};
static const uint8_t and_axis0[] = {1, 1, 1, 0, 0, 0};
static const uint16_t h_x[] = {0x3C00, 0xC000, 0x4200};    /* 1, -2, 3 in float16 */
static const uint16_t h_clip[] = {0x3C00, 0xBC00, 0x4000}; /* clipped to [-1, 2] */
static const uint16_t bh_a[] = {0x3F80, 0x4040};           /* 1, 3 in bfloat16 */
static const uint16_t bh_b[] = {0x4040, 0x40A0};           /* 3, 5 */
static const uint16_t bh_mean[] = {0x4000, 0x4080};        /* 2, 4 */

static const uint8_t f8_nan_in[] = {0x7F, 0x00, 0xFF, 0x7E}; /* E4M3FN: NaN, 0, -NaN, 448 */
static const uint8_t f8_nan_y[] = {1, 0, 1, 0};
static const uint8_t e5_inf_in[] = {0x7C, 0xFC, 0x7B, 0x7E}; /* E5M2: inf, -inf, max, NaN */
static const uint8_t e5_inf_y[] = {1, 1, 0, 0};

static const int32_t erf_ix[] = {-7, 0, 1, 6};
static const int32_t erf_iy[] = {-1, 0, 0, 1}; /* erf truncated toward zero */

/* 2^53 + 2^29 + 1 rounds once to 2^53 + 2^30; via double it would become 2^53. */
static const int64_t i64_in[] = {9007199791611905LL, -3, 0};
static const float i64_f[] = {9007200328482816.0f, -3.0f, 0.0f};
static const uint16_t f16_back_in[] = {0x3C00, 0x0001, 0x7C00, 0xFBFF};
static const float f16_back_out[] = {1.0f, 5.9604644775390625e-08f, INFINITY, -65504.0f};

/* bfloat16 has 7 mantissa bits: 1 + 2^-8 is a tie between 0x3F80 and
 * 0x3F81 (to even: 0x3F80); 1 + 3 * 2^-8 one between 0x3F81 and 0x3F82. */
static const float bf_in[] = {1.00390625f, 1.01171875f, -2.0f};
static const uint16_t bf_out[] = {0x3F80, 0x3F82, 0xC000};
/* 1 + 2^-24 is halfway between two floats (to even: 1.0); 1 + 3 * 2^-24 goes up. */
static const double d_in[] = {1.000000059604644775390625, 1.000000178813934326171875};
static const float d_out[] = {1.0f, 1.0000002384185791015625f};

static const Case cases[] = {
    /* clang-format off */
    /* --- broadcasting ----------------------------------------------------------------- */
    {"Add: tensor + scalar", 14, "Add", NOATTR, 2,
     {{F32(2, {2, 3}), ARR(f_2x3)}, {F32(0, {0}), ARR(f_scalar)}},
     ONYX_ELEM_FLOAT32, 2, {2, 3}, f_2x3_plus, 6, NULL},
    {"Add: rank mismatch [2,1] + [3]", 14, "Add", NOATTR, 2,
     {{ONYX_ELEM_INT32, 2, {2, 1}, ARR(i_a21)}, {ONYX_ELEM_INT32, 1, {3}, ARR(i_b3)}},
     ONYX_ELEM_INT32, 2, {2, 3}, i_a21_b3, 6, NULL},
    {"Add: zero-size dim [0,3] + [3]", 14, "Add", NOATTR, 2,
     {{F32(2, {0, 3}), NULL, 0}, {F32(1, {3}), ARR(f_3)}},
     ONYX_ELEM_FLOAT32, 2, {0, 3}, NULL, 0, NULL},
    {"Mul: empty [0] * [1]", 14, "Mul", NOATTR, 2,
     {{F32(1, {0}), NULL, 0}, {F32(1, {1}), ARR(f_scalar)}},
     ONYX_ELEM_FLOAT32, 1, {0}, NULL, 0, NULL},
    {"Add: incompatible [2,3] + [4]", 14, "Add", NOATTR, 2,
     {{F32(2, {2, 3}), ARR(f_2x3)}, {F32(1, {4}), ARR(f_4)}},
     ONYX_ELEM_FLOAT32, 0, {0}, NULL, 0, "broadcast"},
    {"Max: three inputs broadcast", 13, "Max", NOATTR, 3,
     {{F32(2, {2, 1}), ARR(v_a21)}, {F32(2, {1, 3}), ARR(v_b13)}, {F32(0, {0}), ARR(v_c)}},
     ONYX_ELEM_FLOAT32, 2, {2, 3}, v_max3, 6, NULL},
    {"Max: incompatible shapes", 13, "Max", NOATTR, 2,
     {{F32(1, {3}), ARR(f_3)}, {F32(1, {4}), ARR(f_4)}},
     ONYX_ELEM_FLOAT32, 0, {0}, NULL, 0, "broadcast"},
    /* --- division and modulo ------------------------------------------------------------ */
    {"Div: int32 by zero is an error", 14, "Div", NOATTR, 2,
     {{ONYX_ELEM_INT32, 1, {2}, ARR(i_num)}, {ONYX_ELEM_INT32, 1, {2}, ARR(i_zero_den)}},
     ONYX_ELEM_INT32, 0, {0}, NULL, 0, "division by zero"},
    {"Mod: int32 by zero is an error", 13, "Mod", NOATTR, 2,
     {{ONYX_ELEM_INT32, 1, {2}, ARR(i_num)}, {ONYX_ELEM_INT32, 1, {2}, ARR(i_zero_den)}},
     ONYX_ELEM_INT32, 0, {0}, NULL, 0, "division by zero"},
    {"Div: float by zero gives inf/nan", 14, "Div", NOATTR, 2,
     {{F32(1, {3}), ARR(div_x)}, {F32(1, {3}), ARR(div_z)}},
     ONYX_ELEM_FLOAT32, 1, {3}, div_y, 3, NULL},
    {"Mod: fmod=0 takes the divisor's sign", 13, "Mod", NOATTR, 2,
     {{ONYX_ELEM_INT32, 1, {4}, ARR(mod_a)}, {ONYX_ELEM_INT32, 1, {4}, ARR(mod_b)}},
     ONYX_ELEM_INT32, 1, {4}, mod_py, 4, NULL},
    {"Mod: fmod=1 takes the dividend's sign", 13, "Mod", {INT("fmod", 1)}, 2,
     {{ONYX_ELEM_INT32, 1, {4}, ARR(mod_a)}, {ONYX_ELEM_INT32, 1, {4}, ARR(mod_b)}},
     ONYX_ELEM_INT32, 1, {4}, mod_c, 4, NULL},
    {"Mod: float fmod", 13, "Mod", {INT("fmod", 1)}, 2,
     {{F32(1, {2}), ARR(fmod_a)}, {F32(1, {2}), ARR(fmod_b)}},
     ONYX_ELEM_FLOAT32, 1, {2}, fmod_c, 2, NULL},
    {"Pow: int32", 15, "Pow", NOATTR, 2,
     {{ONYX_ELEM_INT32, 1, {3}, ARR(pow_b)}, {ONYX_ELEM_INT32, 1, {3}, ARR(pow_e)}},
     ONYX_ELEM_INT32, 1, {3}, pow_y, 3, NULL},
    /* --- variadic ----------------------------------------------------------------------- */
    {"Max: NaN propagates", 13, "Max", NOATTR, 2,
     {{F32(1, {3}), ARR(nan_a)}, {F32(1, {3}), ARR(nan_b)}},
     ONYX_ELEM_FLOAT32, 1, {3}, max_nan, 3, NULL},
    {"Min: NaN propagates", 13, "Min", NOATTR, 2,
     {{F32(1, {3}), ARR(nan_a)}, {F32(1, {3}), ARR(nan_b)}},
     ONYX_ELEM_FLOAT32, 1, {3}, min_nan, 3, NULL},
    {"Mean: two inputs", 13, "Mean", NOATTR, 2,
     {{F32(1, {2}), ARR(mean_a)}, {F32(1, {2}), ARR(mean_b)}},
     ONYX_ELEM_FLOAT32, 1, {2}, mean_ab, 2, NULL},
    {"Sum: one float64 input", 13, "Sum", NOATTR, 1,
     {{ONYX_ELEM_FLOAT64, 1, {2}, ARR(d_sum1)}},
     ONYX_ELEM_FLOAT64, 1, {2}, d_sum1, 2, NULL},
    /* --- Cast --------------------------------------------------------------------------- */
    {"Cast: float to int32 truncates, saturates, NaN -> 0", 13, "Cast",
     {INT("to", ONYX_ELEM_INT32)}, 1,
     {{F32(1, {6}), ARR(cast_fi_in)}},
     ONYX_ELEM_INT32, 1, {6}, cast_fi_out, 6, NULL},
    {"Cast: float to bool, NaN is true", 13, "Cast", {INT("to", ONYX_ELEM_BOOL)}, 1,
     {{F32(1, {5}), ARR(cast_fb_in)}},
     ONYX_ELEM_BOOL, 1, {5}, cast_fb_out, 5, NULL},
    {"Cast: float to float8e4m3fn, saturate", 19, "Cast", {INT("to", ONYX_ELEM_FLOAT8E4M3FN)}, 1,
     {{F32(1, {7}), ARR(f8_in)}},
     ONYX_ELEM_FLOAT8E4M3FN, 1, {7}, f8_sat, 7, NULL},
    {"Cast: float to float8e4m3fn, no saturate", 19, "Cast",
     {INT("to", ONYX_ELEM_FLOAT8E4M3FN), INT("saturate", 0)}, 1,
     {{F32(1, {7}), ARR(f8_in)}},
     ONYX_ELEM_FLOAT8E4M3FN, 1, {7}, f8_nosat, 7, NULL},
    {"Cast: float to float8e5m2, no saturate", 19, "Cast",
     {INT("to", ONYX_ELEM_FLOAT8E5M2), INT("saturate", 0)}, 1,
     {{F32(1, {7}), ARR(f8_in)}},
     ONYX_ELEM_FLOAT8E5M2, 1, {7}, e5_nosat, 7, NULL},
    {"Cast: float to float8e4m3fnuz, saturate", 19, "Cast",
     {INT("to", ONYX_ELEM_FLOAT8E4M3FNUZ)}, 1,
     {{F32(1, {7}), ARR(f8_in)}},
     ONYX_ELEM_FLOAT8E4M3FNUZ, 1, {7}, fnuz_sat, 7, NULL},
    {"Cast: float8e4m3fn to float", 19, "Cast", {INT("to", ONYX_ELEM_FLOAT32)}, 1,
     {{ONYX_ELEM_FLOAT8E4M3FN, 1, {4}, ARR(f8_back_in)}},
     ONYX_ELEM_FLOAT32, 1, {4}, f8_back_out, 4, NULL},
    {"Cast: float to float16, ties to even, overflow to inf", 13, "Cast",
     {INT("to", ONYX_ELEM_FLOAT16)}, 1,
     {{F32(1, {4}), ARR(f16_in)}},
     ONYX_ELEM_FLOAT16, 1, {4}, f16_out, 4, NULL},
    {"Cast: float to int4, packed and wrapping", 21, "Cast", {INT("to", ONYX_ELEM_INT4)}, 1,
     {{F32(1, {5}), ARR(i4_in)}},
     ONYX_ELEM_INT4, 1, {5}, i4_out, 5, NULL},
    {"Cast: int4 to int8, sign-extended", 21, "Cast", {INT("to", ONYX_ELEM_INT8)}, 1,
     {{ONYX_ELEM_INT4, 1, {4}, ARR(i4_back_in)}},
     ONYX_ELEM_INT8, 1, {4}, i4_back_out, 4, NULL},
    {"Cast: string to float", 13, "Cast", {INT("to", ONYX_ELEM_FLOAT32)}, 1,
     {{ONYX_ELEM_STRING, 1, {4}, ARR(str_in)}},
     ONYX_ELEM_FLOAT32, 1, {4}, str_out, 4, NULL},
    {"Cast: float to string", 13, "Cast", {INT("to", ONYX_ELEM_STRING)}, 1,
     {{F32(1, {3}), ARR(num_for_str)}},
     ONYX_ELEM_STRING, 1, {3}, num_str, 3, NULL},
    {"CastLike: float to float16 like the target", 15, "CastLike", NOATTR, 2,
     {{F32(1, {4}), ARR(f16_in)}, {ONYX_ELEM_FLOAT16, 1, {1}, ARR(f16_one)}},
     ONYX_ELEM_FLOAT16, 1, {4}, f16_out, 4, NULL},
    {"BitCast: float32 to int32", 26, "BitCast", {INT("to", ONYX_ELEM_INT32)}, 1,
     {{F32(1, {1}), ARR(bc_in)}},
     ONYX_ELEM_INT32, 1, {1}, bc_out, 1, NULL},
    {"Cast-24: float to e8m0, round_mode up", 24, "Cast", {INT("to", ONYX_ELEM_FLOAT8E8M0)}, 1,
     {{F32(1, {5}), ARR(e8_in)}},
     ONYX_ELEM_FLOAT8E8M0, 1, {5}, e8_up, 5, NULL},
    {"Cast-24: float to e8m0, round_mode down", 24, "Cast",
     {INT("to", ONYX_ELEM_FLOAT8E8M0), STR("round_mode", "down")}, 1,
     {{F32(1, {5}), ARR(e8_in)}},
     ONYX_ELEM_FLOAT8E8M0, 1, {5}, e8_down, 5, NULL},
    {"Cast-24: float to e8m0, round_mode nearest", 24, "Cast",
     {INT("to", ONYX_ELEM_FLOAT8E8M0), STR("round_mode", "nearest")}, 1,
     {{F32(1, {5}), ARR(e8_in)}},
     ONYX_ELEM_FLOAT8E8M0, 1, {5}, e8_near, 5, NULL},
    {"Cast-24: bad round_mode", 24, "Cast",
     {INT("to", ONYX_ELEM_FLOAT8E8M0), STR("round_mode", "sideways")}, 1,
     {{F32(1, {5}), ARR(e8_in)}},
     ONYX_ELEM_FLOAT8E8M0, 0, {0}, NULL, 0, "round_mode"},
    {"Cast-23: float to float4e2m1, packed", 23, "Cast", {INT("to", ONYX_ELEM_FLOAT4E2M1)}, 1,
     {{F32(1, {6}), ARR(fp4_in)}},
     ONYX_ELEM_FLOAT4E2M1, 1, {6}, fp4_out, 6, NULL},
    {"Cast: string that is no number", 13, "Cast", {INT("to", ONYX_ELEM_FLOAT32)}, 1,
     {{ONYX_ELEM_STRING, 1, {3}, ARR(eq_a)}},
     ONYX_ELEM_FLOAT32, 0, {0}, NULL, 0, "not a number"},
    {"BitCast: widths differ", 26, "BitCast", {INT("to", ONYX_ELEM_INT64)}, 1,
     {{F32(1, {1}), ARR(bc_in)}},
     ONYX_ELEM_INT64, 0, {0}, NULL, 0, "width"},
    /* --- compare, logic, bitwise, Clip ---------------------------------------------------- */
    {"Equal: strings", 19, "Equal", NOATTR, 2,
     {{ONYX_ELEM_STRING, 1, {3}, ARR(eq_a)}, {ONYX_ELEM_STRING, 1, {3}, ARR(eq_b)}},
     ONYX_ELEM_BOOL, 1, {3}, eq_ab, 3, NULL},
    {"Xor: bool", 7, "Xor", NOATTR, 2,
     {{ONYX_ELEM_BOOL, 1, {4}, ARR(b_a)}, {ONYX_ELEM_BOOL, 1, {4}, ARR(b_b)}},
     ONYX_ELEM_BOOL, 1, {4}, b_xor, 4, NULL},
    {"And-1: legacy broadcast along axis 0", 1, "And", {INT("broadcast", 1), INT("axis", 0)}, 2,
     {{ONYX_ELEM_BOOL, 2, {2, 3}, ARR(and_a)}, {ONYX_ELEM_BOOL, 1, {2}, ARR(and_b)}},
     ONYX_ELEM_BOOL, 2, {2, 3}, and_axis0, 6, NULL},
    {"Clip-6: float16 with attribute bounds", 6, "Clip", {FLT("min", -1.0f), FLT("max", 2.0f)}, 1,
     {{ONYX_ELEM_FLOAT16, 1, {3}, ARR(h_x)}},
     ONYX_ELEM_FLOAT16, 1, {3}, h_clip, 3, NULL},
    {"Mean-13: bfloat16", 13, "Mean", NOATTR, 2,
     {{ONYX_ELEM_BFLOAT16, 1, {2}, ARR(bh_a)}, {ONYX_ELEM_BFLOAT16, 1, {2}, ARR(bh_b)}},
     ONYX_ELEM_BFLOAT16, 1, {2}, bh_mean, 2, NULL},
    {"BitwiseAnd: int16", 18, "BitwiseAnd", NOATTR, 2,
     {{ONYX_ELEM_INT16, 1, {2}, ARR(bw_a)}, {ONYX_ELEM_INT16, 1, {2}, ARR(bw_b)}},
     ONYX_ELEM_INT16, 1, {2}, bw_and, 2, NULL},
    {"BitwiseNot: int16", 18, "BitwiseNot", NOATTR, 1,
     {{ONYX_ELEM_INT16, 1, {2}, ARR(bw_a)}},
     ONYX_ELEM_INT16, 1, {2}, bw_not, 2, NULL},
    {"BitShift: RIGHT, shift past the width is 0", 11, "BitShift", {STR("direction", "RIGHT")}, 2,
     {{ONYX_ELEM_UINT8, 1, {4}, ARR(sh_x)}, {ONYX_ELEM_UINT8, 1, {4}, ARR(sh_n)}},
     ONYX_ELEM_UINT8, 1, {4}, shr_y, 4, NULL},
    {"BitShift: LEFT wraps in the type", 11, "BitShift", {STR("direction", "LEFT")}, 2,
     {{ONYX_ELEM_UINT8, 1, {4}, ARR(sh_x)}, {ONYX_ELEM_UINT8, 1, {4}, ARR(sh_n)}},
     ONYX_ELEM_UINT8, 1, {4}, shl_y, 4, NULL},
    {"BitShift: bad direction", 11, "BitShift", {STR("direction", "UP")}, 2,
     {{ONYX_ELEM_UINT8, 1, {4}, ARR(sh_x)}, {ONYX_ELEM_UINT8, 1, {4}, ARR(sh_n)}},
     ONYX_ELEM_UINT8, 0, {0}, NULL, 0, "direction"},
    {"Clip: int32 with min/max inputs", 13, "Clip", NOATTR, 3,
     {{ONYX_ELEM_INT32, 1, {4}, ARR(clip_x)},
      {ONYX_ELEM_INT32, 0, {0}, ARR(clip_lo)},
      {ONYX_ELEM_INT32, 0, {0}, ARR(clip_hi)}},
     ONYX_ELEM_INT32, 1, {4}, clip_y, 4, NULL},
    /* --- unary and activations ---------------------------------------------------------- */
    {"Sign: int32", 13, "Sign", NOATTR, 1,
     {{ONYX_ELEM_INT32, 1, {3}, ARR(sign_x)}},
     ONYX_ELEM_INT32, 1, {3}, sign_y, 3, NULL},
    {"Erf: int32", 13, "Erf", NOATTR, 1, {{ONYX_ELEM_INT32, 1, {4}, ARR(erf_ix)}},
     ONYX_ELEM_INT32, 1, {4}, erf_iy, 4, NULL},
    {"Round: half to even", 11, "Round", NOATTR, 1,
     {{F32(1, {5}), ARR(round_x)}},
     ONYX_ELEM_FLOAT32, 1, {5}, round_y, 5, NULL},
    {"IsInf: detect_negative=0", 10, "IsInf", {INT("detect_negative", 0)}, 1,
     {{F32(1, {4}), ARR(inf_x)}},
     ONYX_ELEM_BOOL, 1, {4}, inf_pos, 4, NULL},
    {"IsNaN", 13, "IsNaN", NOATTR, 1,
     {{F32(1, {4}), ARR(inf_x)}},
     ONYX_ELEM_BOOL, 1, {4}, nan_y, 4, NULL},
    {"IsNaN-20: float8e4m3fn", 20, "IsNaN", NOATTR, 1,
     {{ONYX_ELEM_FLOAT8E4M3FN, 1, {4}, ARR(f8_nan_in)}},
     ONYX_ELEM_BOOL, 1, {4}, f8_nan_y, 4, NULL},
    {"IsInf-20: float8e5m2", 20, "IsInf", NOATTR, 1,
     {{ONYX_ELEM_FLOAT8E5M2, 1, {4}, ARR(e5_inf_in)}},
     ONYX_ELEM_BOOL, 1, {4}, e5_inf_y, 4, NULL},
    {"Gelu: approximate=tanh", 20, "Gelu", {STR("approximate", "tanh")}, 1,
     {{F32(1, {4}), ARR(gelu_x)}},
     ONYX_ELEM_FLOAT32, 1, {4}, gelu_tanh, 4, NULL},
    {"Gelu: exact", 20, "Gelu", NOATTR, 1,
     {{F32(1, {4}), ARR(gelu_x)}},
     ONYX_ELEM_FLOAT32, 1, {4}, gelu_erf, 4, NULL},
    {"Gelu: bad approximate", 20, "Gelu", {STR("approximate", "fast")}, 1,
     {{F32(1, {4}), ARR(gelu_x)}},
     ONYX_ELEM_FLOAT32, 0, {0}, NULL, 0, "approximate"},
    {"Selu: defaults", 6, "Selu", NOATTR, 1,
     {{F32(1, {3}), ARR(selu_x)}},
     ONYX_ELEM_FLOAT32, 1, {3}, selu_y, 3, NULL},
    {"Celu: alpha=2", 12, "Celu", {FLT("alpha", 2.0f)}, 1,
     {{F32(1, {3}), ARR(selu_x)}},
     ONYX_ELEM_FLOAT32, 1, {3}, celu_y, 3, NULL},
    {"Softplus: no overflow for large x", 1, "Softplus", NOATTR, 1,
     {{F32(1, {4}), ARR(sp_x)}},
     ONYX_ELEM_FLOAT32, 1, {4}, sp_y, 4, NULL},
    {"PRelu: slope broadcast over the last dim", 16, "PRelu", NOATTR, 2,
     {{F32(2, {2, 3}), ARR(pr_x)}, {F32(1, {3}), ARR(pr_s)}},
     ONYX_ELEM_FLOAT32, 2, {2, 3}, pr_y, 6, NULL},
    {"PRelu-6: 1-D slope runs along dim 1", 6, "PRelu", NOATTR, 2,
     {{F32(3, {2, 3, 1}), ARR(pr_x)}, {F32(1, {3}), ARR(pr_s)}},
     ONYX_ELEM_FLOAT32, 3, {2, 3, 1}, pr_y, 6, NULL},
    /* --- axis ops ------------------------------------------------------------------------ */
    {"LogSoftmax-11: axis 0 coerces to one row", 11, "LogSoftmax", {INT("axis", 0)}, 1,
     {{F32(2, {2, 2}), ARR(ls_x)}},
     ONYX_ELEM_FLOAT32, 2, {2, 2}, ls_2d, 4, NULL},
    {"LogSoftmax-13: axis 0 is one axis", 13, "LogSoftmax", {INT("axis", 0)}, 1,
     {{F32(2, {2, 2}), ARR(ls_x)}},
     ONYX_ELEM_FLOAT32, 2, {2, 2}, ls_ax0, 4, NULL},
    {"LogSoftmax-13: axis out of range", 13, "LogSoftmax", {INT("axis", 2)}, 1,
     {{F32(2, {2, 2}), ARR(ls_x)}},
     ONYX_ELEM_FLOAT32, 0, {0}, NULL, 0, "axis"},
    {"Hardmax-13: first maximum wins", 13, "Hardmax", NOATTR, 1,
     {{F32(2, {2, 3}), ARR(hm_x)}},
     ONYX_ELEM_FLOAT32, 2, {2, 3}, hm_y, 6, NULL},
    {"Hardmax: empty input", 13, "Hardmax", NOATTR, 1,
     {{F32(2, {0, 3}), NULL, 0}},
     ONYX_ELEM_FLOAT32, 2, {0, 3}, NULL, 0, NULL},
    /* clang-format on */
};

/* Compared bit for bit (float outputs included): rounding that a relative
 * tolerance cannot see. */
static const Case exact_cases[] = {
    /* clang-format off */
    {"Cast: int64 to float rounds once", 13, "Cast", {INT("to", ONYX_ELEM_FLOAT32)}, 1,
     {{ONYX_ELEM_INT64, 1, {3}, ARR(i64_in)}},
     ONYX_ELEM_FLOAT32, 1, {3}, i64_f, 3, NULL},
    {"Cast: float16 to float (subnormal, inf, lowest)", 13, "Cast",
     {INT("to", ONYX_ELEM_FLOAT32)}, 1,
     {{ONYX_ELEM_FLOAT16, 1, {4}, ARR(f16_back_in)}},
     ONYX_ELEM_FLOAT32, 1, {4}, f16_back_out, 4, NULL},
    {"Cast: float to bfloat16, ties to even", 13, "Cast", {INT("to", ONYX_ELEM_BFLOAT16)}, 1,
     {{F32(1, {3}), ARR(bf_in)}},
     ONYX_ELEM_BFLOAT16, 1, {3}, bf_out, 3, NULL},
    {"Cast: float64 to float32 rounds to nearest even", 13, "Cast",
     {INT("to", ONYX_ELEM_FLOAT32)}, 1,
     {{ONYX_ELEM_FLOAT64, 1, {2}, ARR(d_in)}},
     ONYX_ELEM_FLOAT32, 1, {2}, d_out, 2, NULL},
    /* clang-format on */
};

/* --- the runner ---------------------------------------------------------------------- */

static bool is_float(int t) {
  return t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64;
}

static size_t elem_bytes(int t, size_t n) {
  switch (t) {
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_INT64:
  case ONYX_ELEM_UINT64:
    return 8 * n;
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_UINT32:
    return 4 * n;
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_BFLOAT16:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_UINT16:
    return 2 * n;
  case ONYX_ELEM_INT4:
  case ONYX_ELEM_UINT4:
  case ONYX_ELEM_FLOAT4E2M1:
    return (n + 1) / 2;
  default:
    return n;
  }
}

static double get_float(int t, const void* d, size_t i) {
  return t == ONYX_ELEM_FLOAT32 ? ((const float*)d)[i] : ((const double*)d)[i];
}

/* NULL on success, else the error message (malloc'd). */
static char* run_case(const Case* c, OnyxValue** out) {
  OxTestModel* m = otm_new(c->opset);
  static const char* const in_list[MAX_IN + 1] = {"", "x0", "x0,x1", "x0,x1,x2"};
  static const char* const in_names[MAX_IN] = {"x0", "x1", "x2"};
  for (int k = 0; k < c->n_in; k++)
    otm_input(m, in_names[k], c->in[k].type, c->in[k].rank, c->in[k].dims);
  const char* names = in_list[c->n_in];
  OxTestNode* n = otm_node(m, c->op, "n0", names, "y");
  for (int k = 0; k < 3 && c->attrs[k].name; k++) {
    const TAttr* a = &c->attrs[k];
    if (a->kind == A_INT) otm_attr_int(n, a->name, a->i);
    if (a->kind == A_FLOAT) otm_attr_float(n, a->name, a->f);
    if (a->kind == A_STRING) otm_attr_string(n, a->name, a->s);
  }
  otm_output(m, "y", c->out_type, -1, NULL);
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  OnyxValue* in[MAX_IN] = {0};
  for (int k = 0; !st && k < c->n_in; k++)
    st = onyx_value_create_tensor(c->in[k].type, c->in[k].dims, (size_t)c->in[k].rank,
                                  c->in[k].data, c->in[k].bytes, &in[k]);
  const char* out_name = "y";
  if (!st)
    st = onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, (size_t)c->n_in,
                          &out_name, 1, out);
  for (int k = 0; k < c->n_in; k++)
    onyx_value_release(in[k]);
  onyx_session_release(s);
  char* msg = st ? strdup(onyx_status_message(st)) : NULL;
  onyx_status_release(st);
  return msg;
}

static void check_case(const Case* c, bool exact) {
  OnyxValue* y = NULL;
  char* err = run_case(c, &y);
  if (c->error) {
    if (!err) fail_msg("%s: expected an error with '%s', got success", c->desc, c->error);
    if (!strstr(err, c->error)) fail_msg("%s: '%s' not in '%s'", c->desc, c->error, err);
    /* Errors that reach a kernel name the node. */
    if (!strstr(err, "n0")) fail_msg("%s: the node is not named in '%s'", c->desc, err);
    free(err);
    onyx_values_release(&y, 1);
    return;
  }
  if (err) fail_msg("%s: unexpected error: %s", c->desc, err);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_non_null(t);
  if ((int)onyx_tensor_elem_type(t) != c->out_type)
    fail_msg("%s: output type %d, expected %d", c->desc, onyx_tensor_elem_type(t), c->out_type);
  if ((int)onyx_tensor_rank(t) != c->out_rank)
    fail_msg("%s: output rank %zu, expected %d", c->desc, onyx_tensor_rank(t), c->out_rank);
  for (int d = 0; d < c->out_rank; d++)
    if (onyx_tensor_dims(t)[d] != c->out_dims[d])
      fail_msg("%s: dim %d is %lld, expected %lld", c->desc, d, (long long)onyx_tensor_dims(t)[d],
               (long long)c->out_dims[d]);
  assert_int_equal(onyx_tensor_elem_count(t), c->out_count);
  const void* got = onyx_tensor_data(t);
  for (size_t i = 0; i < c->out_count; i++) {
    if (is_float(c->out_type) && !exact) {
      double e = get_float(c->out_type, c->expect, i), g = get_float(c->out_type, got, i);
      bool same = isnan(e) ? isnan(g) : isinf(e) ? e == g : fabs(e - g) <= 1e-6 + 1e-5 * fabs(e);
      if (!same) fail_msg("%s: element %zu is %.9g, expected %.9g", c->desc, i, g, e);
    } else if (c->out_type == ONYX_ELEM_STRING) {
      const char* e = ((const char* const*)c->expect)[i];
      const char* g = ((const char* const*)got)[i];
      if (strcmp(e, g ? g : ""))
        fail_msg("%s: element %zu is '%s', expected '%s'", c->desc, i, g, e);
    }
  }
  if ((exact || !is_float(c->out_type)) && c->out_type != ONYX_ELEM_STRING && c->out_count) {
    size_t nb = elem_bytes(c->out_type, c->out_count);
    assert_int_equal(onyx_tensor_byte_size(t), nb);
    const uint8_t* g = got;
    const uint8_t* e = c->expect;
    for (size_t b = 0; b < nb; b++)
      if (g[b] != e[b]) fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x", c->desc, b, g[b], e[b]);
  }
  onyx_values_release(&y, 1);
}

static void test_cases(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], false);
}

static void test_exact_cases(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof exact_cases / sizeof exact_cases[0]; i++)
    check_case(&exact_cases[i], true);
}

/* Softmax never outputs a denormal: probabilities whose exact value is below
 * FLT_MIN (e^-100 / sum, e^-87.5 / sum, and e^-87 / 2.5, about 6.6e-39) are
 * 0, so a MatMul reading them does not hit the slow denormal arithmetic; the
 * rest match e^(x - max) / sum computed here in double. 20 values in a row
 * (a full AVX-512 vector and a tail), and the same with one row of 3. */
static void test_softmax_underflow(void** state) {
  (void)state;
  static const float x[20] = {0.0f,   -100.0f, -87.5f, -87.0f, -0.5f,  -1.0f, -2.0f,
                              -3.0f,  -4.0f,   -5.0f,  -6.0f,  -7.0f,  -8.0f, -9.0f,
                              -10.0f, -20.0f,  -30.0f, -40.0f, -50.0f, -60.0f};
  for (int rows = 1; rows <= 2; rows++) {
    const int64_t w = rows == 1 ? 20 : 10;
    const Case c = {"Softmax underflow",
                    13,
                    "Softmax",
                    NOATTR,
                    1,
                    {{F32(2, {rows, w}), (const void*)x, sizeof x}},
                    ONYX_ELEM_FLOAT32,
                    2,
                    {rows, w},
                    NULL,
                    20,
                    NULL};
    OnyxValue* y = NULL;
    char* err = run_case(&c, &y);
    if (err) fail_msg("unexpected error: %s", err);
    const float* got = onyx_tensor_data(onyx_value_tensor(y));
    for (int r = 0; r < rows; r++) {
      double mx = -INFINITY, sum = 0;
      for (int i = 0; i < w; i++)
        mx = fmax(mx, x[r * w + i]);
      for (int i = 0; i < w; i++)
        sum += exp((double)x[r * w + i] - mx);
      for (int i = 0; i < w; i++) {
        const double e = exp((double)x[r * w + i] - mx) / sum;
        const float g = got[r * w + i];
        if (fpclassify(g) == FP_SUBNORMAL)
          fail_msg("row %d element %d is a denormal, %.9g", r, i, (double)g);
        if (e < FLT_MIN) {
          if (g != 0.0f) fail_msg("row %d element %d is %.9g, expected 0", r, i, (double)g);
        } else if (fabs(g - e) > 1e-6 * e + 1e-30) {
          fail_msg("row %d element %d is %.9g, expected %.9g", r, i, (double)g, e);
        }
      }
    }
    onyx_values_release(&y, 1);
  }
}

/* 2-D float32 MaxPool (its separable AVX-512 path, its 16-window rows and
 * its eight-window path) against a naive loop written here: rows wider than 8 windows,
 * padding on every side, strides 1 and 2, a dilation, a 2x3 kernel, a
 * window that sees only padding (pads 2 with a 2-wide kernel), and
 * duplicate maxima. */
static void test_maxpool_2d_paths(void** state) {
  (void)state;
  static const struct {
    int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  } cfg[] = {{3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {2, 3, 1, 1, 1, 1, 0, 1, 0, 1},
             {3, 3, 1, 2, 2, 2, 2, 2, 2, 2}, {2, 2, 1, 1, 1, 1, 2, 2, 0, 0},
             {3, 3, 2, 2, 1, 1, 0, 0, 0, 0}, {3, 5, 1, 1, 1, 1, 1, 2, 1, 2}};
  enum { C = 2, H = 9, W = 41 };
  static float x[C * H * W];
  /* pass 0: many equal values (the separable path, where the CPU has
   * AVX-512); pass 1: NaN in one plane too (that plane takes the exact
   * path), with the row-major rule: the window's first valid element,
   * then `v > best` (NaN first: NaN; else NaN skipped) */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < C * H * W; i++)
      x[i] = (float)((i * 7919) % 23) - 11.0f;
    if (pass)
      for (int i = H * W; i < C * H * W; i += 37)
        x[i] = NAN;
    for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
      OxTestModel* m = otm_new(13);
      otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C, H, W});
      OxTestNode* n = otm_node(m, "MaxPool", "mp", "x", "y");
      otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){cfg[t].kh, cfg[t].kw});
      otm_attr_ints(n, "strides", 2, (int64_t[]){cfg[t].sh, cfg[t].sw});
      otm_attr_ints(n, "dilations", 2, (int64_t[]){cfg[t].dh, cfg[t].dw});
      otm_attr_ints(n, "pads", 4, (int64_t[]){cfg[t].pt, cfg[t].pl, cfg[t].pb, cfg[t].pr});
      otm_output(m, "y", ONYX_ELEM_FLOAT32, -1, NULL);
      uint8_t* bytes;
      size_t len;
      otm_serialize(m, &bytes, &len);
      otm_free(m);
      OnyxSession* s = NULL;
      OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
      free(bytes);
      if (st) fail_msg("config %zu: %s", t, onyx_status_message(st));
      OnyxValue* in = NULL;
      assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, C, H, W}, 4, x,
                                           sizeof x, &in));
      const char* in_name = "x";
      const char* out_name = "y";
      OnyxValue* out = NULL;
      st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
      if (st) fail_msg("config %zu: %s", t, onyx_status_message(st));
      const OnyxTensor* yt = onyx_value_tensor(out);
      const int64_t oh =
          (H + cfg[t].pt + cfg[t].pb - (cfg[t].kh - 1) * cfg[t].dh - 1) / cfg[t].sh + 1;
      const int64_t ow =
          (W + cfg[t].pl + cfg[t].pr - (cfg[t].kw - 1) * cfg[t].dw - 1) / cfg[t].sw + 1;
      assert_int_equal(onyx_tensor_dims(yt)[2], oh);
      assert_int_equal(onyx_tensor_dims(yt)[3], ow);
      const float* y = onyx_tensor_data(yt);
      for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < oh; i++)
          for (int64_t j = 0; j < ow; j++) {
            float want = -INFINITY;
            int seen = 0;
            for (int64_t a = 0; a < cfg[t].kh; a++)
              for (int64_t b = 0; b < cfg[t].kw; b++) {
                const int64_t r = i * cfg[t].sh - cfg[t].pt + a * cfg[t].dh;
                const int64_t q = j * cfg[t].sw - cfg[t].pl + b * cfg[t].dw;
                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                const float v = x[(c * H + r) * W + q];
                if (!seen++)
                  want = v;
                else if (v > want)
                  want = v;
              }
            const float got = y[(c * oh + i) * ow + j];
            if (isnan(want) ? !isnan(got) : got != want)
              fail_msg("config %zu: y[%lld,%lld,%lld] = %g, expected %g", t, (long long)c,
                       (long long)i, (long long)j, (double)got, (double)want);
          }
      onyx_value_release(in);
      onyx_value_release(out);
      onyx_session_release(s);
    }
  }
}

/* Conv with few output positions (5 x 5 and 1 x 1 per image, batch 2) and
 * 64 or 72 output channels: with ONYX_CPU_CONV_DIRECT=0 (or on a machine
 * without AVX-512) the CPU provider computes Y^T with W^T packed (its
 * small-output path), else the direct path takes it; both with the bias
 * and, through the optimizer's FusedConv, a Relu in the epilogue. Against a
 * naive loop written here. */
static void test_conv_small_output(void** state) {
  (void)state;
  for (int direct = 0; direct < 2; direct++) {
    if (direct)
      unsetenv("ONYX_CPU_CONV_DIRECT");
    else
      setenv("ONYX_CPU_CONV_DIRECT", "0", 1);
    enum { N = 2, C = 8, H = 9, W = 9 };
    static float x[N * C * H * W], w[72 * C * 81], b[72];
    for (int i = 0; i < N * C * H * W; i++)
      x[i] = (float)((i * 37) % 19 - 9) / 9.0f;
    for (int i = 0; i < 72 * C * 81; i++)
      w[i] = (float)((i * 11) % 23 - 11) / 30.0f;
    for (int i = 0; i < 72; i++)
      b[i] = (float)(i % 7 - 3) / 4.0f;
    static const struct {
      int64_t m, k, s, p;
      int relu;
    } cfg[] = {{64, 3, 2, 1, 1}, {72, 3, 2, 1, 0}, {64, 9, 1, 0, 1}};
    for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
      const int64_t M = cfg[t].m, K = cfg[t].k, S = cfg[t].s, P = cfg[t].p;
      const int64_t OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
      OxTestModel* m = otm_new(13);
      otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){N, C, H, W});
      /* the first M*C*K*K values of w, as [M, C, K, K] */
      otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 4, (int64_t[]){M, C, K, K}, w);
      otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){M}, b);
      OxTestNode* n = otm_node(m, "Conv", "conv", "x,w,b", cfg[t].relu ? "c" : "y");
      otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){K, K});
      otm_attr_ints(n, "strides", 2, (int64_t[]){S, S});
      otm_attr_ints(n, "pads", 4, (int64_t[]){P, P, P, P});
      if (cfg[t].relu) otm_node(m, "Relu", "relu", "c", "y");
      otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){N, M, OH, OW});
      uint8_t* bytes;
      size_t len;
      otm_serialize(m, &bytes, &len);
      otm_free(m);
      OnyxSession* s = NULL;
      OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
      free(bytes);
      if (st) fail_msg("config %zu: %s", t, onyx_status_message(st));
      OnyxValue* in = NULL;
      assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, C, H, W}, 4, x,
                                           sizeof x, &in));
      const char* in_name = "x";
      const char* out_name = "y";
      OnyxValue* out = NULL;
      st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
      if (st) fail_msg("config %zu: %s", t, onyx_status_message(st));
      const float* y = onyx_tensor_data(onyx_value_tensor(out));
      int zeros = 0;
      for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < M; o++)
          for (int64_t r = 0; r < OH; r++)
            for (int64_t q = 0; q < OW; q++) {
              double acc = b[o];
              for (int64_t c = 0; c < C; c++)
                for (int64_t u = 0; u < K; u++)
                  for (int64_t v = 0; v < K; v++) {
                    const int64_t ih = r * S - P + u, iw = q * S - P + v;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                      acc += (double)x[((i * C + c) * H + ih) * W + iw] *
                             w[((o * C + c) * K + u) * K + v];
                  }
              if (cfg[t].relu && acc < 0) acc = 0;
              const float got = y[((i * M + o) * OH + r) * OW + q];
              zeros += got == 0.0f;
              if (fabs(got - acc) > 1e-4 + 1e-4 * fabs(acc))
                fail_msg("config %zu: y[%lld,%lld,%lld,%lld] = %.7g, expected %.7g", t,
                         (long long)i, (long long)o, (long long)r, (long long)q, (double)got, acc);
            }
      if (cfg[t].relu) assert_true(zeros > 0);
      onyx_value_release(in);
      onyx_value_release(out);
      onyx_session_release(s);
    }
  }
  unsetenv("ONYX_CPU_CONV_DIRECT");
}

/* Large inputs take the thread-pool paths: x + b over [300, 256] with b
 * [256] runs 2-D rows in parallel, Neg and s * s dense blocks; 3 threads,
 * checked against a plain loop. */
static void test_large_parallel(void** state) {
  (void)state;
  enum { R = 300, C = 256 };
  OxTestModel* m = otm_new(14);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){R, C});
  otm_input(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C});
  otm_node(m, "Add", "add", "x,b", "s");
  otm_node(m, "Neg", "neg", "s", "y");
  otm_node(m, "Mul", "mul", "s,s", "z");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){R, C});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){R, C});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_threads(o, 3));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  if (st) fail_msg("%s", onyx_status_message(st));
  float* x = malloc(sizeof(float) * R * C);
  float b[C];
  assert_non_null(x);
  for (int i = 0; i < R * C; i++)
    x[i] = (float)(i % 977) * 0.25f - 100.0f;
  for (int j = 0; j < C; j++)
    b[j] = (float)j * 0.5f;
  OnyxValue* in[2] = {NULL, NULL};
  assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){R, C}, 2, x,
                                       sizeof(float) * R * C, &in[0]));
  assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){C}, 1, b, sizeof b, &in[1]));
  const char* in_names[2] = {"x", "b"};
  const char* out_names[2] = {"y", "z"};
  OnyxValue* out[2] = {NULL, NULL};
  st = onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, 2, out_names, 2, out);
  if (st) fail_msg("%s", onyx_status_message(st));
  const float* y = onyx_tensor_data(onyx_value_tensor(out[0]));
  const float* z = onyx_tensor_data(onyx_value_tensor(out[1]));
  for (int i = 0; i < R * C; i++) {
    float sum = x[i] + b[i % C];
    if (y[i] != -sum) fail_msg("y[%d] = %g, expected %g", i, y[i], -sum);
    if (z[i] != sum * sum) fail_msg("z[%d] = %g, expected %g", i, z[i], sum * sum);
  }
  onyx_values_release(out, 2);
  onyx_values_release(in, 2);
  free(x);
  onyx_session_release(s);
  onyx_session_options_release(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cases),
                                     cmocka_unit_test(test_exact_cases),
                                     cmocka_unit_test(test_large_parallel),
                                     cmocka_unit_test(test_softmax_underflow),
                                     cmocka_unit_test(test_maxpool_2d_paths),
                                     cmocka_unit_test(test_conv_small_output)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

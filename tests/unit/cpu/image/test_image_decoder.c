/* test_image_decoder.c — ImageDecoder (20) on the CPU provider, through a
 * session. The inputs are tiny files made by hand: PNG chunks with zlib's
 * CRC-32 and deflate, a 24-bit bottom-up BMP, binary PNM (P5, P6) and an
 * uncompressed little-endian TIFF, all written with Python's struct/zlib while
 * writing this test (each comment gives the pixels). JPEG and WebP inputs are
 * encoded at test time with libjpeg and libwebp. Expected pixels are the ones
 * put into the files; grayscale values follow PIL's "L" conversion,
 * L = R*299/1000 + G*587/1000 + B*114/1000 rounded, worked out by hand:
 * red 76.245 -> 76, green 149.685 -> 150, blue 29.07 -> 29,
 * (10, 20, 30) 18.15 -> 18. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

#ifdef IMG_TEST_JPEG
#include <jpeglib.h>
#endif
#ifdef IMG_TEST_WEBP
#include <webp/encode.h>
#endif

/* PNG 3x2 RGB: (255,0,0) (0,255,0) (0,0,255) / (255,255,255) (0,0,0) (10,20,30). */
static const uint8_t png_rgb[78] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0x12, 0x16, 0xf1,
    0x4d, 0x00, 0x00, 0x00, 0x15, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xc0,
    0x00, 0xc1, 0xff, 0xff, 0x83, 0x68, 0x2e, 0x11, 0x39, 0x00, 0x45, 0x33, 0x06, 0x37, 0x63, 0xe2,
    0xcd, 0x3b, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
/* PNG 2x2 8-bit gray: 0 77 / 200 255. */
static const uint8_t png_gray[71] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x00, 0x00, 0x00, 0x57,
    0xdd, 0x52, 0xf8, 0x00, 0x00, 0x00, 0x0e, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60,
    0xf0, 0x65, 0x38, 0xf1, 0x1f, 0x00, 0x03, 0xc9, 0x02, 0x15, 0x64, 0xe8, 0xb9, 0x95, 0x00,
    0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
/* PNG 4x1, 1-bit palette [(12,34,56), (250,128,3)], indices 0 1 1 0, with a tRNS
 * chunk (which RGB output ignores). */
static const uint8_t png_pal[99] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03, 0x00, 0x00, 0x00, 0xc3,
    0xf2, 0x9d, 0x8e, 0x00, 0x00, 0x00, 0x06, 0x50, 0x4c, 0x54, 0x45, 0x0c, 0x22, 0x38, 0xfa,
    0x80, 0x03, 0x46, 0xe2, 0xea, 0x69, 0x00, 0x00, 0x00, 0x02, 0x74, 0x52, 0x4e, 0x53, 0x00,
    0xff, 0x5b, 0x91, 0x22, 0xb5, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c,
    0x63, 0x48, 0x00, 0x00, 0x00, 0x62, 0x00, 0x61, 0xb1, 0x98, 0x79, 0xf2, 0x00, 0x00, 0x00,
    0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
/* PNG 2x1 RGBA: (1,2,3,0) (200,100,50,128): alpha is dropped. */
static const uint8_t png_rgba[74] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0xf4,
    0x22, 0x7f, 0x8a, 0x00, 0x00, 0x00, 0x11, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60,
    0x64, 0x62, 0x66, 0x38, 0x91, 0x62, 0xd4, 0x00, 0x00, 0x05, 0x61, 0x01, 0xe5, 0x5f, 0x0c,
    0x83, 0xb9, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
/* PNG 1x1 16-bit RGB: 0x1234 0xabcd 0xff00 (8-bit: the high bytes). */
static const uint8_t png_rgb16[72] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x10, 0x02, 0x00, 0x00, 0x00, 0xc0,
    0xe7, 0x8f, 0x9d, 0x00, 0x00, 0x00, 0x0f, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x10,
    0x32, 0x59, 0x7d, 0xf6, 0x3f, 0x03, 0x00, 0x08, 0x88, 0x02, 0xbe, 0x66, 0x03, 0x65, 0x97,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
/* PNG 3x1 16-bit gray: 0x0080 0x1234 0x00ff (PIL "I;16": clipped to 255). */
static const uint8_t png_gray16[72] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x10, 0x00, 0x00, 0x00, 0x00, 0x6e,
    0x1b, 0x97, 0x2b, 0x00, 0x00, 0x00, 0x0f, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60,
    0x68, 0x10, 0x32, 0x61, 0xf8, 0x0f, 0x00, 0x04, 0x6a, 0x01, 0xc6, 0x75, 0xa2, 0x4c, 0x52,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
/* BMP 2x2 24-bit, rows stored bottom-up in BGR order, padded to 4 bytes;
 * top row (255,0,0) (0,255,0), bottom row (0,0,255) (10,20,30). */
static const uint8_t bmp[70] = {
    0x42, 0x4d, 0x46, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x36, 0x00, 0x00, 0x00,
    0x28, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x13, 0x0b, 0x00, 0x00,
    0x13, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00,
    0x00, 0x1e, 0x14, 0x0a, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00, 0xff, 0x00, 0x00, 0x00};
/* "P6\n# c\n2 1\n255\n" then (255,0,0) (10,20,30). */
static const uint8_t pnm_p6[21] = {0x50, 0x36, 0x0a, 0x23, 0x20, 0x63, 0x0a, 0x32, 0x20, 0x31, 0x0a,
                                   0x32, 0x35, 0x35, 0x0a, 0xff, 0x00, 0x00, 0x0a, 0x14, 0x1e};
/* "P5 3 1 255\n" then gray 0 128 255. */
static const uint8_t pnm_p5[14] = {0x50, 0x35, 0x20, 0x33, 0x20, 0x31, 0x20,
                                   0x32, 0x35, 0x35, 0x0a, 0x00, 0x80, 0xff};
/* TIFF (II) 2x2 uncompressed RGB, one strip: (255,0,0) (0,255,0) / (0,0,255) (10,20,30). */
static const uint8_t tiff[152] = {
    0x49, 0x49, 0x2a, 0x00, 0x08, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x03, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00,
    0x00, 0x00, 0x02, 0x01, 0x03, 0x00, 0x03, 0x00, 0x00, 0x00, 0x86, 0x00, 0x00, 0x00, 0x03, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x01, 0x03, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x11, 0x01, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x8c, 0x00,
    0x00, 0x00, 0x15, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x16, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x17, 0x01, 0x04, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x1c, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x08, 0x00, 0x08, 0x00, 0xff, 0x00, 0x00, 0x00,
    0xff, 0x00, 0x00, 0x00, 0xff, 0x0a, 0x14, 0x1e};

/* TIFF (II) 2x1 RGBA, unassociated alpha (ExtraSamples 2): (200,100,50,128) (1,2,3,0). */
static const uint8_t tiff_rgba[162] = {
    0x49, 0x49, 0x2a, 0x00, 0x08, 0x00, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x01, 0x03, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x02, 0x01, 0x03, 0x00, 0x04, 0x00, 0x00, 0x00, 0x92, 0x00, 0x00,
    0x00, 0x03, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x11, 0x01, 0x04, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x9a, 0x00, 0x00, 0x00, 0x15, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x16, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x17, 0x01, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x1c, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x52, 0x01, 0x03, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x08, 0x00,
    0x08, 0x00, 0x08, 0x00, 0xc8, 0x64, 0x32, 0x80, 0x01, 0x02, 0x03, 0x00};
/* TIFF (II) 2x1 8-bit WhiteIsZero gray: stored 0 200, i.e. 255 55. */
static const uint8_t tiff_white[136] = {
    0x49, 0x49, 0x2a, 0x00, 0x08, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x03, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x02, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x01, 0x03, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x01, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x86, 0x00,
    0x00, 0x00, 0x15, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x16, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x17, 0x01, 0x04, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x1c, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc8};

/* --- Running one ImageDecoder node --- */

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Decodes data (n bytes) with pixel_format fmt (NULL: the default) in a
 * node named "dec"; *got gets the image or the call returns the error. */
static OnyxStatus* decode_as(const uint8_t* data, size_t n, int rank, const char* fmt,
                             OnyxValue** got) {
  OxTestModel* m = otm_new(20);
  int64_t dims[2] = {(int64_t)n, 1};
  otm_input(m, "x", ONYX_ELEM_UINT8, rank, dims);
  otm_output(m, "y", ONYX_ELEM_UINT8, -1, NULL);
  OxTestNode* node = otm_node(m, "ImageDecoder", "dec", "x", "y");
  if (fmt) otm_attr_string(node, "pixel_format", fmt);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  if (st) return st;
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_UINT8, dims, (size_t)rank, data, n, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, got);
  onyx_value_release(in);
  onyx_session_release(s);
  return st;
}

static OnyxStatus* decode(const uint8_t* data, size_t n, const char* fmt, OnyxValue** got) {
  return decode_as(data, n, 1, fmt, got);
}

/* Checks got is uint8 [h, w, c] within tol of want, and releases it. */
static void expect_image_tol(OnyxValue* got, int64_t h, int64_t w, int64_t c, const uint8_t* want,
                             int tol) {
  const OnyxTensor* t = onyx_value_tensor(got);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_UINT8);
  assert_int_equal(onyx_tensor_rank(t), 3);
  const int64_t* d = onyx_tensor_dims(t);
  assert_int_equal(d[0], h);
  assert_int_equal(d[1], w);
  assert_int_equal(d[2], c);
  const uint8_t* p = onyx_tensor_data(t);
  for (int64_t i = 0; i < h * w * c; i++) {
    int diff = (int)p[i] - (int)want[i];
    if (diff > tol || diff < -tol)
      fail_msg("element %lld (row %lld, col %lld, channel %lld): got %d, want %d", (long long)i,
               (long long)(i / c / w), (long long)(i / c % w), (long long)(i % c), p[i], want[i]);
  }
  onyx_value_release(got);
}

static void expect_image(OnyxValue* got, int64_t h, int64_t w, int64_t c, const uint8_t* want) {
  expect_image_tol(got, h, w, c, want, 0);
}

/* The error names the node and its op, and contains `what`. */
static void expect_error(OnyxStatus* st, const char* what) {
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "'dec'") || !strstr(msg, "ImageDecoder") || !strstr(msg, what))
    fail_msg("error message '%s' lacks the node or '%s'", msg, what);
  onyx_status_release(st);
}

/* --- PNG --- */

#ifdef IMG_TEST_PNG
static void test_png_rgb_bgr_gray(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  ok(decode(png_rgb, sizeof png_rgb, NULL, &got));
  static const uint8_t rgb[] = {255, 0,   0,   0, 255, 0, 0,  0,  255,
                                255, 255, 255, 0, 0,   0, 10, 20, 30};
  expect_image(got, 2, 3, 3, rgb);
  ok(decode(png_rgb, sizeof png_rgb, "BGR", &got));
  static const uint8_t bgr[] = {0,   0,   255, 0, 255, 0, 255, 0,  0,
                                255, 255, 255, 0, 0,   0, 30,  20, 10};
  expect_image(got, 2, 3, 3, bgr);
  ok(decode(png_rgb, sizeof png_rgb, "Grayscale", &got));
  static const uint8_t gray[] = {76, 150, 29, 255, 0, 18};
  expect_image(got, 2, 3, 1, gray);
}

/* Gray sources: replicated into RGB, kept as they are for Grayscale. */
static void test_png_gray_source(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  ok(decode(png_gray, sizeof png_gray, "RGB", &got));
  static const uint8_t rgb[] = {0, 0, 0, 77, 77, 77, 200, 200, 200, 255, 255, 255};
  expect_image(got, 2, 2, 3, rgb);
  ok(decode(png_gray, sizeof png_gray, "Grayscale", &got));
  static const uint8_t gray[] = {0, 77, 200, 255};
  expect_image(got, 2, 2, 1, gray);
}

static void test_png_palette_alpha_16bit(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  ok(decode(png_pal, sizeof png_pal, NULL, &got));
  static const uint8_t pal[] = {12, 34, 56, 250, 128, 3, 250, 128, 3, 12, 34, 56};
  expect_image(got, 1, 4, 3, pal);
  ok(decode(png_rgba, sizeof png_rgba, NULL, &got));
  static const uint8_t rgba[] = {1, 2, 3, 200, 100, 50};
  expect_image(got, 1, 2, 3, rgba);
  ok(decode(png_rgb16, sizeof png_rgb16, "BGR", &got));
  static const uint8_t rgb16[] = {0xff, 0xab, 0x12};
  expect_image(got, 1, 1, 3, rgb16);
  ok(decode(png_gray16, sizeof png_gray16, "Grayscale", &got));
  expect_image(got, 1, 3, 1, (const uint8_t[]){128, 255, 255});
  ok(decode(png_gray16, sizeof png_gray16, "RGB", &got));
  expect_image(got, 1, 3, 3, (const uint8_t[]){128, 128, 128, 255, 255, 255, 255, 255, 255});
}

/* A file cut short, and one with a damaged chunk CRC. */
static void test_png_corrupt(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  expect_error(decode(png_rgb, 50, NULL, &got), "PNG");
  uint8_t bad[sizeof png_rgb];
  memcpy(bad, png_rgb, sizeof bad);
  bad[sizeof bad - 20] ^= 0x55; /* inside the IDAT data */
  expect_error(decode(bad, sizeof bad, NULL, &got), "PNG");
}
#endif

/* --- BMP, PNM --- */

#ifdef IMG_TEST_STB
static void test_bmp(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  ok(decode(bmp, sizeof bmp, NULL, &got));
  static const uint8_t rgb[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
  expect_image(got, 2, 2, 3, rgb);
  ok(decode(bmp, sizeof bmp, "Grayscale", &got));
  static const uint8_t gray[] = {76, 150, 29, 18};
  expect_image(got, 2, 2, 1, gray);
  expect_error(decode(bmp, 30, NULL, &got), "BMP");
}

#endif

/* PNM is read by the provider itself. */
static void test_pnm(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  ok(decode(pnm_p6, sizeof pnm_p6, "BGR", &got));
  static const uint8_t bgr[] = {0, 0, 255, 30, 20, 10};
  expect_image(got, 1, 2, 3, bgr);
  ok(decode(pnm_p5, sizeof pnm_p5, NULL, &got));
  static const uint8_t rgb[] = {0, 0, 0, 128, 128, 128, 255, 255, 255};
  expect_image(got, 1, 3, 3, rgb);
  ok(decode(pnm_p5, sizeof pnm_p5, "Grayscale", &got));
  static const uint8_t gray[] = {0, 128, 255};
  expect_image(got, 1, 3, 1, gray);
  expect_error(decode(pnm_p6, 14, NULL, &got), "PNM");                      /* header cut */
  expect_error(decode(pnm_p6, sizeof pnm_p6 - 1, NULL, &got), "truncated"); /* samples cut */
  expect_error(decode((const uint8_t*)"P3 1 1 255 1 2 3", 16, NULL, &got), "P3");
}

/* PIL's PNM rules: samples scaled by round(v / maxval * 255) (Python's
 * round: 1/6*255 = 42.5 -> 42, 5/6*255 -> 212); P4 bits of 1 are black;
 * 16-bit gray samples are kept as integers and clipped to 255. */
static void test_pnm_pil_rules(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  static const uint8_t p5_6[] = {'P', '5', ' ', '3', ' ', '1', ' ', '6', '\n', 1, 3, 5};
  ok(decode(p5_6, sizeof p5_6, "Grayscale", &got));
  expect_image(got, 1, 3, 1, (const uint8_t[]){42, 128, 212});
  static const uint8_t p6_15[] = {'P', '6', '\n', '1', ' ', '1', '\n', '1', '5', '\n', 7, 15, 0};
  ok(decode(p6_15, sizeof p6_15, NULL, &got));
  expect_image(got, 1, 1, 3, (const uint8_t[]){119, 255, 0});
  static const uint8_t p4[] = {'P', '4', ' ', '1', '0', ' ', '1', '\n', 0xa0, 0x40};
  ok(decode(p4, sizeof p4, "Grayscale", &got));
  expect_image(got, 1, 10, 1, (const uint8_t[]){0, 255, 0, 255, 255, 255, 255, 255, 255, 0});
  static const uint8_t p5_16[] = {'P', '5', ' ', '2',  ' ',  '1',  ' ',  '6', '5',
                                  '5', '3', '5', '\n', 0x00, 0x80, 0x12, 0x34};
  ok(decode(p5_16, sizeof p5_16, "Grayscale", &got));
  expect_image(got, 1, 2, 1, (const uint8_t[]){128, 255});
}
/* --- TIFF --- */

#ifdef IMG_TEST_TIFF
static void test_tiff(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  ok(decode(tiff, sizeof tiff, NULL, &got));
  static const uint8_t rgb[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
  expect_image(got, 2, 2, 3, rgb);
  ok(decode(tiff, sizeof tiff, "Grayscale", &got));
  static const uint8_t gray[] = {76, 150, 29, 18};
  expect_image(got, 2, 2, 1, gray);
  /* Alpha is dropped, not multiplied in (as PIL reads RGBA). */
  ok(decode(tiff_rgba, sizeof tiff_rgba, NULL, &got));
  expect_image(got, 1, 2, 3, (const uint8_t[]){200, 100, 50, 1, 2, 3});
  ok(decode(tiff_white, sizeof tiff_white, "Grayscale", &got));
  expect_image(got, 1, 2, 1, (const uint8_t[]){255, 55});
  /* The directory is intact but the strip is cut short. */
  expect_error(decode(tiff, sizeof tiff - 6, NULL, &got), "TIFF");
  expect_error(decode(tiff, 12, NULL, &got), "TIFF");
}
#endif

/* --- JPEG (encoded here with libjpeg) --- */

#ifdef IMG_TEST_JPEG
/* 16x16: left half (200,30,60), right half (20,180,90); quality 100, no
 * chroma subsampling, so decoding returns the colours within a few levels. */
static uint8_t* make_jpeg(size_t* n, bool gray) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = NULL;
  unsigned long len = 0;
  jpeg_mem_dest(&c, &buf, &len);
  c.image_width = 16;
  c.image_height = 16;
  c.input_components = gray ? 1 : 3;
  c.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  for (int i = 0; i < c.num_components; i++)
    c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  uint8_t row[16 * 3];
  for (int x = 0; x < 16; x++) {
    const uint8_t* px = x < 8 ? (const uint8_t[]){200, 30, 60} : (const uint8_t[]){20, 180, 90};
    if (gray)
      row[x] = x < 8 ? 70 : 160;
    else
      memcpy(row + 3 * x, px, 3);
  }
  while (c.next_scanline < 16) {
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  *n = len;
  return buf;
}

static void test_jpeg(void** state) {
  (void)state;
  size_t n = 0;
  uint8_t* j = make_jpeg(&n, false);
  uint8_t want[16 * 16 * 3], gray[16 * 16];
  for (int i = 0; i < 256; i++) {
    bool left = i % 16 < 8;
    memcpy(want + 3 * i, left ? (const uint8_t[]){200, 30, 60} : (const uint8_t[]){20, 180, 90}, 3);
    gray[i] = left ? 84 : 122; /* 84.25, 121.92 */
  }
  OnyxValue* got = NULL;
  ok(decode(j, n, NULL, &got));
  expect_image_tol(got, 16, 16, 3, want, 4);
  ok(decode(j, n, "Grayscale", &got));
  expect_image_tol(got, 16, 16, 1, gray, 4);
  /* Cut short: libjpeg would pad the picture; the op refuses, as PIL does. */
  expect_error(decode(j, n - 10, NULL, &got), "truncated");
  expect_error(decode(j, 100, NULL, &got), "JPEG"); /* inside the headers */
  free(j);

  j = make_jpeg(&n, true); /* a gray JPEG: replicated into RGB */
  for (int i = 0; i < 256; i++)
    want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = i % 16 < 8 ? 70 : 160;
  ok(decode(j, n, "RGB", &got));
  expect_image_tol(got, 16, 16, 3, want, 2);
  free(j);
}
#endif

/* --- WebP (encoded losslessly here with libwebp) --- */

#ifdef IMG_TEST_WEBP
static void test_webp_lossless(void** state) {
  (void)state;
  static const uint8_t rgb[] = {255, 0,   0,   0, 255, 0, 0,  0,  255,
                                255, 255, 255, 0, 0,   0, 10, 20, 30};
  uint8_t* w = NULL;
  size_t n = WebPEncodeLosslessRGB(rgb, 3, 2, 9, &w);
  assert_true(n > 0);
  OnyxValue* got = NULL;
  ok(decode(w, n, NULL, &got));
  expect_image(got, 2, 3, 3, rgb);
  ok(decode(w, n, "Grayscale", &got));
  static const uint8_t gray[] = {76, 150, 29, 255, 0, 18};
  expect_image(got, 2, 3, 1, gray);
  expect_error(decode(w, n - 8, NULL, &got), "WebP");
  WebPFree(w);
}
#endif

/* --- Inputs no decoder takes --- */

static void test_bad_inputs(void** state) {
  (void)state;
  OnyxValue* got = NULL;
  static const uint8_t text[] = "hello, not an image";
  expect_error(decode(text, sizeof text, NULL, &got), "not an image in a known format");
  static const uint8_t one[] = {0x89};
  expect_error(decode(one, 0, NULL, &got), "empty");
  expect_error(decode(one, 1, NULL, &got), "known format");
  /* pixel_format outside the spec's three values: refused when loading. */
  expect_error(decode(text, sizeof text, "HSV", &got), "pixel_format 'HSV'");
  /* The input must be 1-D. */
  expect_error(decode_as(text, sizeof text, 2, NULL, &got), "1-D");
}

int main(void) {
  const struct CMUnitTest tests[] = {
#ifdef IMG_TEST_PNG
      cmocka_unit_test(test_png_rgb_bgr_gray),
      cmocka_unit_test(test_png_gray_source),
      cmocka_unit_test(test_png_palette_alpha_16bit),
      cmocka_unit_test(test_png_corrupt),
#endif
#ifdef IMG_TEST_STB
      cmocka_unit_test(test_bmp),
#endif
      cmocka_unit_test(test_pnm),
      cmocka_unit_test(test_pnm_pil_rules),
#ifdef IMG_TEST_TIFF
      cmocka_unit_test(test_tiff),
#endif
#ifdef IMG_TEST_JPEG
      cmocka_unit_test(test_jpeg),
#endif
#ifdef IMG_TEST_WEBP
      cmocka_unit_test(test_webp_lossless),
#endif
      cmocka_unit_test(test_bad_inputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

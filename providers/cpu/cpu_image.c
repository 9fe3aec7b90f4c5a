/* cpu_image.c — ImageDecoder (20): decodes one encoded image (a 1-D uint8
 * tensor holding the file's bytes) into a uint8 [H, W, C] tensor, C = 3 for
 * pixel_format "RGB" or "BGR" and 1 for "Grayscale".
 *
 * The format is recognised by its leading bytes and decoded by a Debian
 * library, each optional at build time (ONYX_HAVE_<LIB>, set by
 * CMakeLists.txt when pkg-config finds it):
 *   JPEG       libjpeg-turbo (ONYX_HAVE_JPEG)    PNG   libpng (ONYX_HAVE_PNG)
 *   TIFF       libtiff       (ONYX_HAVE_TIFF)    WebP  libwebp (ONYX_HAVE_WEBP)
 *   JPEG 2000  OpenJPEG      (ONYX_HAVE_OPENJP2) BMP   stb_image (ONYX_HAVE_STB)
 * and PNM (binary P4-P6) read here, a header and raw samples (see below).
 * A file of a format whose library was absent fails with an error naming the
 * format and the library.
 *
 * The ONNX reference decodes with PIL, so the conversions follow PIL's:
 * colour to grayscale is PIL's "L" (ITU-R 601-2 luma in 16-bit fixed point,
 * rounded), gray to colour replicates the channel, and alpha is dropped (not
 * composited). A color JPEG is decoded to RGB and then converted, as PIL does,
 * rather than taking its Y plane. Truncated files are errors (PIL refuses
 * them too), except where a library itself accepts them. */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

#ifdef ONYX_HAVE_JPEG
#include <jerror.h>
#include <jpeglib.h>
#endif
#ifdef ONYX_HAVE_PNG
#include <png.h>
#endif
#ifdef ONYX_HAVE_TIFF
#include <tiffio.h>
#endif
#ifdef ONYX_HAVE_WEBP
#include <webp/decode.h>
#endif
#ifdef ONYX_HAVE_OPENJP2
#include <openjpeg.h>
#endif
#ifdef ONYX_HAVE_STB
#include <stb_image.h>
#endif

/* Decoded images larger than this (bytes of the intermediate buffer) are
 * refused: a corrupt header must not make us allocate gigabytes. */
#define IMG_MAX_BYTES ((size_t)1 << 30)

/* A decoded image: h rows of w pixels of ch interleaved 8-bit channels
 * (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA). err holds a library's message. */
typedef struct Img {
  uint8_t* px;
  size_t w, h;
  int ch;
  char err[256];
} Img;

static void img_set_err(Img* im, const char* fmt, ...) CPU_PRINTF(2, 3);
static void img_set_err(Img* im, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(im->err, sizeof im->err, fmt, ap);
  va_end(ap);
}

/* Allocates im->px for w x h x ch; false (with im->err) when too large. */
static bool img_alloc(Img* im, size_t w, size_t h, int ch) {
  if (!w || !h) {
    img_set_err(im, "the image has no pixels (%zu x %zu)", w, h);
    return false;
  }
  if (w > IMG_MAX_BYTES / h || w * h > IMG_MAX_BYTES / (size_t)ch) {
    img_set_err(im, "the image is too large (%zu x %zu pixels)", w, h);
    return false;
  }
  free(im->px);
  im->px = malloc(w * h * (size_t)ch);
  if (!im->px) {
    img_set_err(im, "out of memory for a %zu x %zu image", w, h);
    return false;
  }
  im->w = w;
  im->h = h;
  im->ch = ch;
  return true;
}

/* --- JPEG (libjpeg-turbo) --- */
#ifdef ONYX_HAVE_JPEG
typedef struct JpegErr {
  struct jpeg_error_mgr mgr; /* first: libjpeg sees a jpeg_error_mgr* */
  jmp_buf jb;
  Img* im;
  bool truncated;
} JpegErr;

static void jpeg_fail(j_common_ptr c) {
  JpegErr* e = (JpegErr*)c->err;
  char msg[JMSG_LENGTH_MAX];
  e->mgr.format_message(c, msg);
  img_set_err(e->im, "%s", msg);
  longjmp(e->jb, 1);
}

/* Warnings are ignored as PIL ignores them, except running out of data. */
static void jpeg_message(j_common_ptr c, int level) {
  JpegErr* e = (JpegErr*)c->err;
  if (level < 0 && e->mgr.msg_code == JWRN_JPEG_EOF) e->truncated = true;
}

/* PIL's cmyk2rgb: each of R, G, B is (255 - c) * (255 - k) / 255, rounded. */
static uint8_t cmyk_part(unsigned c, unsigned k) {
  unsigned t = (255 - c) * (255 - k) + 128;
  return (uint8_t)(((t >> 8) + t) >> 8);
}

static bool decode_jpeg(const uint8_t* data, size_t n, Img* im) {
  struct jpeg_decompress_struct cinfo;
  JpegErr jerr = {.im = im};
  cinfo.err = jpeg_std_error(&jerr.mgr);
  jerr.mgr.error_exit = jpeg_fail;
  jerr.mgr.emit_message = jpeg_message;
  if (setjmp(jerr.jb)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, (unsigned long)n);
  jpeg_read_header(&cinfo, TRUE);
  int ch = 3;
  bool cmyk = false;
  switch (cinfo.jpeg_color_space) {
  case JCS_GRAYSCALE:
    cinfo.out_color_space = JCS_GRAYSCALE;
    ch = 1;
    break;
  case JCS_CMYK:
  case JCS_YCCK:
    cinfo.out_color_space = JCS_CMYK;
    cmyk = true;
    break;
  default:
    cinfo.out_color_space = JCS_RGB;
    break;
  }
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != (cmyk ? 4 : ch)) {
    img_set_err(im, "unexpected number of components (%d)", cinfo.output_components);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (!img_alloc(im, cinfo.output_width, cinfo.output_height, ch)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  JSAMPROW row = NULL;
  if (cmyk) {
    row = (*cinfo.mem->alloc_small)((j_common_ptr)&cinfo, JPOOL_IMAGE,
                                    (size_t)cinfo.output_width * 4);
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = im->px + (size_t)cinfo.output_scanline * im->w * (size_t)ch;
    JSAMPROW rows[1] = {cmyk ? row : dst};
    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) break;
    if (cmyk) {
      /* PIL reads every CMYK JPEG as Adobe's inverted "CMYK;I". */
      for (size_t x = 0; x < im->w; x++) {
        unsigned k = 255u - row[4 * x + 3];
        for (int c = 0; c < 3; c++)
          dst[3 * x + (size_t)c] = cmyk_part(255u - row[4 * x + (size_t)c], k);
      }
    }
  }
  bool short_read = cinfo.output_scanline < cinfo.output_height;
  if (!jerr.truncated && !short_read) jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (jerr.truncated || short_read) {
    img_set_err(im, "the JPEG data is truncated");
    return false;
  }
  return true;
}
#endif

/* --- PNG (libpng) --- */
#ifdef ONYX_HAVE_PNG
typedef struct PngSrc {
  const uint8_t* p;
  size_t n, off;
  uint8_t* row; /* 16-bit gray rows (freed on every path, errors included) */
} PngSrc;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
  PngSrc* s = png_get_io_ptr(png);
  if (len > s->n - s->off) png_error(png, "the PNG data is truncated");
  memcpy(out, s->p + s->off, len);
  s->off += len;
}

static void png_fail(png_structp png, png_const_charp msg) {
  img_set_err(png_get_error_ptr(png), "%s", msg);
  png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

static bool decode_png(const uint8_t* data, size_t n, Img* im) {
  PngSrc src = {data, n, 0, NULL};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, im, png_fail, png_warn);
  if (!png) {
    img_set_err(im, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    img_set_err(im, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(src.row);
    return false;
  }
  png_set_read_fn(png, &src, png_read_mem);
  png_read_info(png, info);
  /* 8 bits per channel, palettes expanded; transparency chunks are not
   * turned into alpha (PIL's RGB/L conversions ignore them too). 16-bit
   * gray is PIL's "I;16", whose conversions clip to 255 rather than keep
   * the high byte: read as 16 bits and clipped below. */
  bool gray16 =
      png_get_color_type(png, info) == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) == 16;
  if (!gray16) png_set_strip_16(png);
  png_set_packing(png);
  if (png_get_color_type(png, info) == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (png_get_color_type(png, info) == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int ch = png_get_channels(png, info);
  size_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (ch < 1 || ch > 4 || png_get_bit_depth(png, info) != (gray16 ? 16 : 8)) {
    png_destroy_read_struct(&png, &info, NULL);
    img_set_err(im, "unsupported PNG layout (%d channels)", ch);
    return false;
  }
  if (!img_alloc(im, w, h, ch)) {
    png_destroy_read_struct(&png, &info, NULL);
    return false;
  }
  if (png_get_rowbytes(png, info) != w * (size_t)ch * (gray16 ? 2 : 1))
    png_error(png, "unexpected PNG row size");
  if (gray16) {
    /* Interlaced passes fill rows in place: keep all 16-bit rows. */
    if (w > SIZE_MAX / 2 / h || !(src.row = malloc(w * h * 2)))
      png_error(png, "out of memory for the 16-bit rows");
  }
  for (int pass = 0; pass < passes; pass++)
    for (size_t y = 0; y < h; y++)
      png_read_row(png, gray16 ? src.row + y * w * 2 : im->px + y * w * (size_t)ch, NULL);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  if (gray16)
    for (size_t i = 0; i < w * h; i++)
      im->px[i] = src.row[2 * i] ? 255 : src.row[2 * i + 1]; /* big-endian, clipped */
  free(src.row);
  return true;
}
#endif

/* --- TIFF (libtiff) --- */
#ifdef ONYX_HAVE_TIFF
typedef struct TiffSrc {
  const uint8_t* p;
  size_t n, off;
} TiffSrc;

static tmsize_t tiff_read(thandle_t h, void* buf, tmsize_t len) {
  TiffSrc* s = h;
  if (len < 0) return -1;
  size_t left = s->off < s->n ? s->n - s->off : 0;
  size_t k = (size_t)len < left ? (size_t)len : left;
  if (k) memcpy(buf, s->p + s->off, k);
  s->off += k;
  return (tmsize_t)k;
}

static tmsize_t tiff_write(thandle_t h, void* buf, tmsize_t len) {
  (void)h;
  (void)buf;
  (void)len;
  return -1;
}

static toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  TiffSrc* s = h;
  uint64_t base = whence == SEEK_CUR ? s->off : whence == SEEK_END ? s->n : 0;
  uint64_t pos = base + off; /* toff_t is unsigned: "negative" offsets wrap */
  if ((whence == SEEK_SET && off > SIZE_MAX) || pos > SIZE_MAX) return (toff_t)-1;
  s->off = (size_t)pos;
  return pos;
}

static int tiff_close(thandle_t h) {
  (void)h;
  return 0;
}

static toff_t tiff_size(thandle_t h) {
  return ((TiffSrc*)h)->n;
}

static int tiff_map(thandle_t h, void** base, toff_t* size) {
  (void)h;
  (void)base;
  (void)size;
  return 0;
}

static void tiff_unmap(thandle_t h, void* base, toff_t size) {
  (void)h;
  (void)base;
  (void)size;
}

/* Keeps libtiff's first error message; warnings are dropped. */
static int tiff_on_error(TIFF* t, void* user, const char* module, const char* fmt, va_list ap) {
  (void)t;
  (void)module;
  Img* im = user;
  if (!im->err[0]) vsnprintf(im->err, sizeof im->err, fmt, ap);
  return 1;
}

static int tiff_on_warning(TIFF* t, void* user, const char* module, const char* fmt, va_list ap) {
  (void)t;
  (void)user;
  (void)module;
  (void)fmt;
  (void)ap;
  return 1;
}

static bool decode_tiff(const uint8_t* data, size_t n, Img* im) {
  TiffSrc src = {data, n, 0};
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  if (!opts) {
    img_set_err(im, "out of memory");
    return false;
  }
  TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_on_error, im);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_on_warning, im);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)IMG_MAX_BYTES);
  TIFF* t = TIFFClientOpenExt("ImageDecoder input", "rm", &src, tiff_read, tiff_write, tiff_seek,
                              tiff_close, tiff_size, tiff_map, tiff_unmap, opts);
  TIFFOpenOptionsFree(opts);
  if (!t) {
    if (!im->err[0]) img_set_err(im, "not a readable TIFF file");
    return false;
  }
  uint32_t w = 0, h = 0;
  uint16_t spp = 1, photo = PHOTOMETRIC_RGB, n_extra = 0, bps = 1, planar = PLANARCONFIG_CONTIG;
  uint16_t* extra = NULL;
  TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(t, TIFFTAG_EXTRASAMPLES, &n_extra, &extra);
  TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
  if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photo)) photo = PHOTOMETRIC_RGB;
  bool gray =
      (photo == PHOTOMETRIC_MINISBLACK || photo == PHOTOMETRIC_MINISWHITE) && spp - n_extra <= 1;
  uint32_t* raster = NULL;
  bool ok;
  /* 8-bit RGB(A) or gray(+alpha) strips: the samples as stored, as PIL
   * reads them (libtiff's RGBA reader would premultiply an alpha channel). */
  bool raw = bps == 8 && planar == PLANARCONFIG_CONTIG && !TIFFIsTiled(t) &&
             ((photo == PHOTOMETRIC_RGB && spp >= 3 && spp <= 4) ||
              (photo == PHOTOMETRIC_MINISBLACK && spp <= 2));
  if (raw) {
    ok = img_alloc(im, w, h, spp);
    if (ok && TIFFScanlineSize64(t) != (uint64_t)w * spp) {
      img_set_err(im, "unexpected TIFF scanline size");
      ok = false;
    }
    for (uint32_t y = 0; ok && y < h; y++) {
      if (TIFFReadScanline(t, im->px + (size_t)y * w * spp, y, 0) < 0) {
        if (!im->err[0]) img_set_err(im, "libtiff could not read row %u", (unsigned)y);
        ok = false;
      }
    }
  } else {
    /* Any other layout: libtiff converts it to packed ABGR words. */
    int ch = gray ? (n_extra ? 2 : 1) : (n_extra ? 4 : 3);
    ok = img_alloc(im, w, h, ch) && w <= IMG_MAX_BYTES / 4 / h;
    if (ok) {
      raster = malloc((size_t)w * h * 4);
      if (!raster) img_set_err(im, "out of memory for a %u x %u image", (unsigned)w, (unsigned)h);
      ok = raster != NULL;
    }
    if (ok && !TIFFReadRGBAImageOriented(t, w, h, raster, ORIENTATION_TOPLEFT, 1)) {
      if (!im->err[0]) img_set_err(im, "libtiff could not read the pixels");
      ok = false;
    }
    for (size_t i = 0, np = (size_t)w * h; ok && i < np; i++) {
      uint32_t v = raster[i];
      uint8_t px[4] = {(uint8_t)TIFFGetR(v), (uint8_t)TIFFGetG(v), (uint8_t)TIFFGetB(v),
                       (uint8_t)TIFFGetA(v)};
      uint8_t* dst = im->px + i * (size_t)ch;
      if (gray) {
        dst[0] = px[0];
        if (ch == 2) dst[1] = px[3];
      } else {
        memcpy(dst, px, (size_t)ch);
      }
    }
  }
  free(raster);
  TIFFClose(t);
  return ok;
}
#endif

/* --- WebP (libwebp) --- */
#ifdef ONYX_HAVE_WEBP
static bool decode_webp(const uint8_t* data, size_t n, Img* im) {
  WebPBitstreamFeatures f;
  VP8StatusCode rc = WebPGetFeatures(data, n, &f);
  if (rc != VP8_STATUS_OK) {
    img_set_err(im, "invalid WebP header (libwebp status %d)", (int)rc);
    return false;
  }
  if (f.has_animation) {
    img_set_err(im, "animated WebP files are not supported");
    return false;
  }
  int ch = f.has_alpha ? 4 : 3;
  if (f.width <= 0 || f.height <= 0 || !img_alloc(im, (size_t)f.width, (size_t)f.height, ch))
    return false;
  size_t stride = im->w * (size_t)ch, size = stride * im->h;
  uint8_t* got = ch == 4 ? WebPDecodeRGBAInto(data, n, im->px, size, (int)stride)
                         : WebPDecodeRGBInto(data, n, im->px, size, (int)stride);
  if (!got) {
    img_set_err(im, "libwebp could not decode the data (corrupt or truncated)");
    return false;
  }
  return true;
}
#endif

/* --- JPEG 2000 (OpenJPEG) --- */
#ifdef ONYX_HAVE_OPENJP2
typedef struct OpjSrc {
  const uint8_t* p;
  size_t n, off;
} OpjSrc;

static OPJ_SIZE_T opj_src_read(void* buf, OPJ_SIZE_T len, void* user) {
  OpjSrc* s = user;
  if (s->off >= s->n) return (OPJ_SIZE_T)-1;
  size_t k = len < s->n - s->off ? len : s->n - s->off;
  memcpy(buf, s->p + s->off, k);
  s->off += k;
  return k;
}

static OPJ_OFF_T opj_src_skip(OPJ_OFF_T k, void* user) {
  OpjSrc* s = user;
  if (k < 0) {
    if ((uint64_t)-k > s->off) return -1;
  } else if ((uint64_t)k > s->n - s->off) {
    k = (OPJ_OFF_T)(s->n - s->off);
  }
  s->off = (size_t)((OPJ_OFF_T)s->off + k);
  return k;
}

static OPJ_BOOL opj_src_seek(OPJ_OFF_T pos, void* user) {
  OpjSrc* s = user;
  if (pos < 0 || (uint64_t)pos > s->n) return OPJ_FALSE;
  s->off = (size_t)pos;
  return OPJ_TRUE;
}

/* Keeps OpenJPEG's first error message (it ends in a newline: dropped). */
static void opj_on_error(const char* msg, void* user) {
  Img* im = user;
  if (im->err[0]) return;
  img_set_err(im, "%s", msg);
  size_t len = strlen(im->err);
  while (len && (im->err[len - 1] == '\n' || im->err[len - 1] == '\r'))
    im->err[--len] = '\0';
}

static void opj_on_message(const char* msg, void* user) {
  (void)msg;
  (void)user;
}

/* PIL's j2k unpacking: signed samples are offset to unsigned, then shifted
 * to 8 bits. */
static uint8_t opj_sample(OPJ_INT32 v, const opj_image_comp_t* c) {
  int64_t x = v;
  if (c->sgnd) x += (int64_t)1 << (c->prec - 1);
  if (c->prec > 8)
    x >>= c->prec - 8;
  else if (c->prec < 8)
    x <<= 8 - c->prec;
  return (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
}

static bool decode_jp2(const uint8_t* data, size_t n, bool jp2, Img* im) {
  OpjSrc src = {data, n, 0};
  opj_stream_t* stream = opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE);
  opj_codec_t* codec = opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  opj_image_t* img = NULL;
  bool ok = stream && codec;
  if (!ok) img_set_err(im, "out of memory");
  if (ok) {
    opj_stream_set_read_function(stream, opj_src_read);
    opj_stream_set_skip_function(stream, opj_src_skip);
    opj_stream_set_seek_function(stream, opj_src_seek);
    opj_stream_set_user_data(stream, &src, NULL);
    opj_stream_set_user_data_length(stream, n);
    opj_set_error_handler(codec, opj_on_error, im);
    opj_set_warning_handler(codec, opj_on_message, im);
    opj_set_info_handler(codec, opj_on_message, im);
    opj_dparameters_t params;
    opj_set_default_decoder_parameters(&params);
    ok = opj_setup_decoder(codec, &params) && opj_read_header(stream, codec, &img) &&
         opj_decode(codec, stream, img) && opj_end_decompress(codec, stream);
    if (!ok && !im->err[0]) img_set_err(im, "OpenJPEG could not decode the data");
  }
  if (ok) {
    unsigned nc = img->numcomps;
    if (nc < 1 || nc > 4 || img->color_space == OPJ_CLRSPC_SYCC ||
        img->color_space == OPJ_CLRSPC_EYCC || img->color_space == OPJ_CLRSPC_CMYK) {
      img_set_err(im, "unsupported JPEG 2000 layout (%u components, colour space %d)", nc,
                  (int)img->color_space);
      ok = false;
    }
    for (unsigned c = 0; ok && c < nc; c++) {
      const opj_image_comp_t* k = &img->comps[c];
      if (!k->data || k->w != img->comps[0].w || k->h != img->comps[0].h || k->prec < 1 ||
          k->prec > 31) {
        img_set_err(im,
                    "unsupported JPEG 2000 layout (component %u is subsampled or has "
                    "%u-bit samples)",
                    c, (unsigned)k->prec);
        ok = false;
      }
    }
    ok = ok && img_alloc(im, img->comps[0].w, img->comps[0].h, (int)nc);
    if (ok) {
      size_t np = im->w * im->h;
      for (unsigned c = 0; c < nc; c++)
        for (size_t i = 0; i < np; i++)
          im->px[i * nc + c] = opj_sample(img->comps[c].data[i], &img->comps[c]);
    }
  }
  if (img) opj_image_destroy(img);
  if (codec) opj_destroy_codec(codec);
  if (stream) opj_stream_destroy(stream);
  return ok;
}
#endif

/* --- BMP (stb_image) --- */
#ifdef ONYX_HAVE_STB
static uint32_t le16(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t* p) {
  return le16(p) | le16(p + 2) << 16;
}

/* stb_image reads past the end of a BMP as zeros; PIL calls such a file
 * truncated. For the uncompressed layouts, the pixel rows must all be there. */
static bool bmp_check_size(const uint8_t* d, size_t n, Img* im) {
  if (n < 26) {
    img_set_err(im, "the BMP header is truncated");
    return false;
  }
  uint64_t off = le32(d + 10), hsz = le32(d + 14), comp = 0, bpp;
  int64_t w, h;
  if (hsz == 12) {
    w = le16(d + 18);
    h = le16(d + 20);
    bpp = le16(d + 24);
  } else {
    if (n < 34) {
      img_set_err(im, "the BMP header is truncated");
      return false;
    }
    w = (int32_t)le32(d + 18);
    h = (int32_t)le32(d + 22);
    bpp = le16(d + 28);
    comp = le32(d + 30);
  }
  if (h < 0) h = -h;
  bool plain = comp == 0 || comp == 3 || comp == 6; /* RGB, BITFIELDS, ALPHABITFIELDS */
  if (!plain || w <= 0 || h <= 0 || w > (1 << 24) || h > (1 << 24) || bpp > 32) return true;
  uint64_t row = ((uint64_t)w * bpp + 31) / 32 * 4;
  if (off + row * (uint64_t)h > n) {
    img_set_err(im, "the BMP data is truncated (%zu bytes; the pixels end at byte %llu)", n,
                (unsigned long long)(off + row * (uint64_t)h));
    return false;
  }
  return true;
}

static bool decode_bmp(const uint8_t* data, size_t n, Img* im) {
  if (n > INT_MAX) {
    img_set_err(im, "the file is too large");
    return false;
  }
  if (!bmp_check_size(data, n, im)) return false;
  int w = 0, h = 0, ch = 0;
  stbi_uc* p = stbi_load_from_memory(data, (int)n, &w, &h, &ch, 0);
  if (!p) {
    const char* why = stbi_failure_reason();
    img_set_err(im, "stb_image: %s", why ? why : "cannot decode");
    return false;
  }
  bool ok = ch >= 1 && ch <= 4 && w > 0 && h > 0 && img_alloc(im, (size_t)w, (size_t)h, ch);
  if (ok)
    memcpy(im->px, p, im->w * im->h * (size_t)ch);
  else if (!im->err[0])
    img_set_err(im, "stb_image returned %d channels", ch);
  stbi_image_free(p);
  return ok;
}
#endif

/* --- PNM (built in) --- */

/* Netpbm's binary forms, read here rather than with stb_image, which neither
 * notices a file cut short nor rescales a maxval other than 255 the way PIL
 * does. P4 (bitmap: 1 is black), P5 (gray), P6 (RGB); samples of 1 or 2
 * bytes (maxval > 255), scaled as PIL does (see decode_pnm). The plain
 * (ASCII) forms P1-P3 are refused. */

/* Skips whitespace and '#' comments, then reads a decimal number. */
static bool pnm_number(const uint8_t* d, size_t n, size_t* pos, uint64_t* out) {
  size_t i = *pos;
  for (;;) {
    while (i < n && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r' || d[i] == '\v' ||
                     d[i] == '\f'))
      i++;
    if (i < n && d[i] == '#') {
      while (i < n && d[i] != '\n' && d[i] != '\r')
        i++;
      continue;
    }
    break;
  }
  if (i >= n || d[i] < '0' || d[i] > '9') return false;
  uint64_t v = 0;
  while (i < n && d[i] >= '0' && d[i] <= '9') {
    v = v * 10 + (uint64_t)(d[i] - '0');
    if (v > UINT32_MAX) return false;
    i++;
  }
  *pos = i;
  *out = v;
  return true;
}

static bool decode_pnm(const uint8_t* d, size_t n, Img* im) {
  char kind = (char)d[1];
  if (kind < '4') {
    img_set_err(im, "plain (ASCII) PNM files (P%c) are not supported", kind);
    return false;
  }
  size_t pos = 2;
  uint64_t w, h, maxval = 1;
  if (!pnm_number(d, n, &pos, &w) || !pnm_number(d, n, &pos, &h) ||
      (kind != '4' && !pnm_number(d, n, &pos, &maxval)) || pos >= n) {
    img_set_err(im, "the PNM header is malformed or truncated");
    return false;
  }
  pos++; /* the single whitespace byte before the samples */
  if (maxval < 1 || maxval > 65535) {
    img_set_err(im, "the PNM maxval %llu is outside 1..65535", (unsigned long long)maxval);
    return false;
  }
  int ch = kind == '6' ? 3 : 1;
  if (!img_alloc(im, (size_t)w, (size_t)h, ch)) return false;
  size_t bps = maxval > 255 ? 2 : 1;
  size_t row = kind == '4' ? (im->w + 7) / 8 : im->w * (size_t)ch * bps;
  if (n - pos < row || (n - pos) / row < im->h) {
    img_set_err(im, "the PNM data is truncated");
    return false;
  }
  /* PIL reads a gray file with maxval > 255 as 32-bit integers scaled to
   * 0..65535 and clips them to 255 when converting; everything else is
   * scaled to 0..255. */
  double top = kind == '5' && maxval > 255 ? 65535.0 : 255.0;
  const uint8_t* p = d + pos;
  uint8_t* out = im->px;
  for (size_t y = 0; y < im->h; y++, p += row) {
    if (kind == '4') {
      for (size_t x = 0; x < im->w; x++)
        *out++ = (p[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255;
      continue;
    }
    for (size_t i = 0; i < im->w * (size_t)ch; i++) {
      double v = bps == 2 ? (double)((unsigned)p[2 * i] << 8 | p[2 * i + 1]) : (double)p[i];
      if (maxval != top) v = rint(v / (double)maxval * top); /* Python's round: half to even */
      *out++ = (uint8_t)(v > 255 ? 255 : v);
    }
  }
  return true;
}

/* --- Format detection --- */

typedef enum ImgFormat {
  IMG_UNKNOWN,
  IMG_BMP,
  IMG_JPEG,
  IMG_JP2,
  IMG_J2K,
  IMG_PNG,
  IMG_PNM,
  IMG_TIFF,
  IMG_WEBP
} ImgFormat;

static ImgFormat img_sniff(const uint8_t* d, size_t n) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static const uint8_t jp2_sig[12] = {0, 0, 0, 12, 'j', 'P', ' ', ' ', '\r', '\n', 0x87, '\n'};
  if (n >= 8 && !memcmp(d, png_sig, 8)) return IMG_PNG;
  if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return IMG_JPEG;
  if (n >= 12 && !memcmp(d, jp2_sig, 12)) return IMG_JP2;
  if (n >= 4 && d[0] == 0xff && d[1] == 0x4f && d[2] == 0xff && d[3] == 0x51) return IMG_J2K;
  if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) return IMG_TIFF;
  if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return IMG_WEBP;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return IMG_BMP;
  if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '6' &&
      (d[2] == ' ' || d[2] == '\t' || d[2] == '\n' || d[2] == '\r'))
    return IMG_PNM;
  return IMG_UNKNOWN;
}

static const char* img_format_name(ImgFormat f) {
  switch (f) {
  case IMG_BMP:
    return "BMP";
  case IMG_JPEG:
    return "JPEG";
  case IMG_JP2:
  case IMG_J2K:
    return "JPEG 2000";
  case IMG_PNG:
    return "PNG";
  case IMG_PNM:
    return "PNM";
  case IMG_TIFF:
    return "TIFF";
  case IMG_WEBP:
    return "WebP";
  default:
    return "unknown";
  }
}

/* Decodes d with the format's library. Returns 1 on success, 0 on a decoding
 * error (im->err says why), -1 when the library was not built in (*lib names
 * it). */
static int img_decode(ImgFormat f, const uint8_t* d, size_t n, Img* im, const char** lib) {
  switch (f) {
  case IMG_JPEG:
    *lib = "libjpeg (libjpeg62-turbo-dev)";
#ifdef ONYX_HAVE_JPEG
    return decode_jpeg(d, n, im);
#else
    return -1;
#endif
  case IMG_PNG:
    *lib = "libpng (libpng-dev)";
#ifdef ONYX_HAVE_PNG
    return decode_png(d, n, im);
#else
    return -1;
#endif
  case IMG_TIFF:
    *lib = "libtiff (libtiff-dev)";
#ifdef ONYX_HAVE_TIFF
    return decode_tiff(d, n, im);
#else
    return -1;
#endif
  case IMG_WEBP:
    *lib = "libwebp (libwebp-dev)";
#ifdef ONYX_HAVE_WEBP
    return decode_webp(d, n, im);
#else
    return -1;
#endif
  case IMG_JP2:
  case IMG_J2K:
    *lib = "OpenJPEG (libopenjp2-7-dev)";
#ifdef ONYX_HAVE_OPENJP2
    return decode_jp2(d, n, f == IMG_JP2, im);
#else
    return -1;
#endif
  case IMG_BMP:
    *lib = "stb_image (libstb-dev)";
#ifdef ONYX_HAVE_STB
    return decode_bmp(d, n, im);
#else
    return -1;
#endif
  case IMG_PNM:
    *lib = "built in";
    return decode_pnm(d, n, im);
  default:
    *lib = "none";
    return 0;
  }
}

/* --- The kernel --- */

typedef enum PixFmt { PIX_RGB, PIX_BGR, PIX_GRAY } PixFmt;

typedef struct ImageState {
  PixFmt fmt;
} ImageState;

static OnyxStatus* image_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  size_t len = 0;
  const char* s = cpu_host->node_attr_string(node, "pixel_format", &len);
  PixFmt fmt;
  if (!s || (len == 3 && !memcmp(s, "RGB", 3)))
    fmt = PIX_RGB;
  else if (len == 3 && !memcmp(s, "BGR", 3))
    fmt = PIX_BGR;
  else if (len == 9 && !memcmp(s, "Grayscale", 9))
    fmt = PIX_GRAY;
  else
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "pixel_format '%.*s' is not one of RGB, BGR, Grayscale",
                     (int)(len > 64 ? 64 : len), s);
  ImageState* st = malloc(sizeof *st);
  if (!st) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  st->fmt = fmt;
  *out = st;
  return NULL;
}

/* PIL's RGB -> L: ITU-R 601-2 luma in 16-bit fixed point, rounded. */
static uint8_t luma(unsigned r, unsigned g, unsigned b) {
  return (uint8_t)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

static void img_to_output(const Img* im, PixFmt fmt, uint8_t* out) {
  size_t np = im->w * im->h, ch = (size_t)im->ch;
  for (size_t i = 0; i < np; i++) {
    const uint8_t* p = im->px + i * ch;
    uint8_t r = p[0], g = ch >= 3 ? p[1] : p[0], b = ch >= 3 ? p[2] : p[0];
    if (fmt == PIX_GRAY) {
      out[i] = ch >= 3 ? luma(r, g, b) : r;
    } else {
      out[3 * i + 0] = fmt == PIX_RGB ? r : b;
      out[3 * i + 1] = g;
      out[3 * i + 2] = fmt == PIX_RGB ? b : r;
    }
  }
}

static OnyxStatus* image_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const ImageState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  if (H->tensor_rank(x) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "input 'encoded_stream' must be 1-D, not of rank %zu", H->tensor_rank(x));
  size_t n = H->tensor_elem_count(x);
  const uint8_t* d = H->tensor_data(x);
  if (!n) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input 'encoded_stream' is empty");
  ImgFormat f = img_sniff(d, n);
  if (f == IMG_UNKNOWN)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "input 'encoded_stream' is not an image in a known format (BMP, JPEG, "
                         "JPEG 2000, PNG, PNM, TIFF, WebP)");
  Img im = {0};
  const char* lib = NULL;
  int rc = img_decode(f, d, n, &im, &lib);
  if (rc < 0)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED,
                         "input 'encoded_stream' is a %s image, but this build of the CPU "
                         "provider has no %s decoder: it was built without %s",
                         img_format_name(f), img_format_name(f), lib);
  if (rc == 0) {
    free(im.px);
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cannot decode the %s image: %s",
                         img_format_name(f), im.err[0] ? im.err : "unknown error");
  }
  int64_t dims[3] = {(int64_t)im.h, (int64_t)im.w, s->fmt == PIX_GRAY ? 1 : 3};
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, dims, 3, &y);
  if (!st) img_to_output(&im, s->fmt, H->tensor_mutable_data(y));
  free(im.px);
  return st;
}

static const int32_t u8_types[] = {ONYX_ELEM_UINT8};
static const OnyxTypeConstraint image_tc[] = {{"T1", u8_types, 1}, {"T2", u8_types, 1}};

static const CpuKernelSpec image_specs[] = {
    {"ImageDecoder", 20, ONYX_OPSET_LATEST, image_tc, CPU_ARRAY_LEN(image_tc), image_create,
     image_compute, cpu_free_state, NULL},
};

OnyxStatus* cpu_register_image(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, image_specs, CPU_ARRAY_LEN(image_specs));
}

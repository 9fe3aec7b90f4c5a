/* schemas_image.c — the image family: ImageDecoder (20). Newer than the
 * generated table (opset 17), so the row is written here from the ONNX spec:
 * one 1-D uint8 input (the encoded file), one uint8 output [H, W, C] with C
 * 3 for "RGB"/"BGR" and 1 for "Grayscale" (attribute pixel_format). */
#include <string.h>

#include "infer_util.h"
#include "schema_internal.h"

#define T_(x) OX_T(ONYX_ELEM_##x)

static const OxFormal imgdec_in[] = {{"encoded_stream", "T1", ONYX_PARAM_SINGLE, 1}};
static const OxFormal imgdec_out[] = {{"image", "T2", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr imgdec_tc[] = {{"T1", T_(UINT8)}, {"T2", T_(UINT8)}};
static const OxAttrSpec imgdec_attrs[] = {
    {.name = "pixel_format", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "RGB"},
};

/* Output: uint8 [H, W, C]; H and W are known only once the image is decoded. */
static OnyxStatus* infer_image_decoder(OxNode* n) {
  OxDims in;
  ox_in_dims(n, 0, &in);
  if (in.rank >= 0 && in.rank != 1)
    return ox_node_err(n, "input 'encoded_stream' must be 1-D, not of rank %d", (int)in.rank);
  const char* fmt = ox_attr_s(n, "pixel_format", "RGB");
  int64_t c;
  if (!strcmp(fmt, "RGB") || !strcmp(fmt, "BGR"))
    c = 3;
  else if (!strcmp(fmt, "Grayscale"))
    c = 1;
  else
    return ox_node_err(n, "pixel_format '%s' is not one of RGB, BGR, Grayscale", fmt);
  OxDims d = {.rank = 3, .d = {ONYX_DIM_UNKNOWN, ONYX_DIM_UNKNOWN, c}};
  return ox_out_set(n, 0, ONYX_ELEM_UINT8, &d);
}

static const OxSchema image_rows[] = {
    {"", "ImageDecoder", 20, imgdec_in, OX_ARRAY_LEN(imgdec_in), imgdec_out,
     OX_ARRAY_LEN(imgdec_out), imgdec_tc, OX_ARRAY_LEN(imgdec_tc), imgdec_attrs,
     OX_ARRAY_LEN(imgdec_attrs), infer_image_decoder, NULL, NULL, true},
};

const OxSchemaFamily ox_family_image = {"image", image_rows, OX_ARRAY_LEN(image_rows), NULL, 0};

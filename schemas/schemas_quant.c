/* schemas_quant.c — the quant family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows. */
#include "infer_util.h"
#include "schema_internal.h"

const OxSchemaFamily ox_family_quant = {"quant", NULL, 0, NULL, 0};

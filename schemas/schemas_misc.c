/* schemas_misc.c — the misc family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows. */
#include "infer_util.h"
#include "schema_internal.h"

const OxSchemaFamily ox_family_misc = {"misc", NULL, 0, NULL, 0};

/* cpu_ml.h — internal to the CPU provider: what the ai.onnx.ml kernel files
 * (cpu_ml.c, cpu_ml_models.c, cpu_ml_prep.c) share: list-of-strings
 * attributes with their byte lengths, class labels, the post_transform of
 * the classifiers and regressors, and X read as float32 rows. */
#ifndef CPU_ML_H
#define CPU_ML_H

#include "cpu_util.h"

/* A list-of-strings attribute (NULL, *count 0 when absent); *lens gets the
 * entries' byte lengths, NUL bytes included, or NULL from a host without
 * node_attr_strings_lens (then each entry ends at its first NUL). */
const char* const* ml_attr_strings(const OnyxNode* node, const char* name, size_t* count,
                                   const size_t** lens);

/* post_transform, in ONNX Runtime's numbering. */
enum { ML_POST_NONE, ML_POST_LOGISTIC, ML_POST_SOFTMAX, ML_POST_SOFTMAX_ZERO, ML_POST_PROBIT };

/* Reads the string attribute post_transform (absent: NONE); any other word
 * is an error naming the node and the attribute. */
OnyxStatus* ml_post_attr(const OnyxNode* node, int* out);

float ml_logistic(float x);
/* sqrt(2) * erfinv(2x - 1), with the closed-form erfinv approximation
 * (Winitzki, a = 0.147) ONNX Runtime uses, so PROBIT scores agree with it. */
float ml_probit(float x);
/* The transform of one row of n >= 2 scores, in place. */
void ml_post_row(float* s, size_t n, int post);

/* classlabels_ints or classlabels_strings (at most one may be given). */
typedef struct MlLabels {
  bool strings;
  size_t n;
  const char* const* s;
  const size_t* s_len; /* NULL: each ends at its first NUL */
  const int64_t* i;
} MlLabels;

OnyxStatus* ml_labels_attr(const OnyxNode* node, MlLabels* out);
/* Checks that Y's element type is the labels' kind (string or int64). */
OnyxStatus* ml_check_label_output(OnyxKernelContext* ctx, const OnyxTensor* y, const MlLabels* l);
/* Y[i] = label k. */
OnyxStatus* ml_put_label(OnyxTensor* y, size_t i, const MlLabels* l, size_t k);
/* Y[i] = "1" / "0" (strings) or 1 / 0 (ints): the labels a binary model
 * without two class labels writes. */
OnyxStatus* ml_put_binary(OnyxTensor* y, size_t i, bool strings, bool positive);

/* X of rank 1 ([F], one row) or 2 ([N, F]) as float32 row-major data
 * (borrowed when X is float32, else converted into scratch memory). */
OnyxStatus* ml_rows_f32(OnyxKernelContext* ctx, const OnyxTensor* x, const float** out,
                        size_t* rows, size_t* cols);

#endif

/* cpu_nms.c — the CPU provider's NonMaxSuppression, computed in double. */
#include "cpu_nnop_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* NonMaxSuppression                                                         */
/* ======================================================================== */

typedef struct NmsCand {
  double score;
  int64_t index;
} NmsCand;

static int nms_cmp(const void* a, const void* b) {
  const NmsCand *x = a, *y = b;
  /* A total order: NaN scores sort last. */
  const bool xn = isnan(x->score), yn = isnan(y->score);
  if (xn != yn) return xn ? 1 : -1;
  if (!xn && x->score != y->score) return x->score > y->score ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Box as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2. */
static void nms_box(const double* b, bool center, double* o) {
  if (center) {
    o[0] = b[1] - b[3] / 2;
    o[1] = b[0] - b[2] / 2;
    o[2] = b[1] + b[3] / 2;
    o[3] = b[0] + b[2] / 2;
  } else {
    o[0] = fmin(b[0], b[2]);
    o[1] = fmin(b[1], b[3]);
    o[2] = fmax(b[0], b[2]);
    o[3] = fmax(b[1], b[3]);
  }
}

static double nms_iou(const double* a, const double* b) {
  const double ih = fmin(a[2], b[2]) - fmax(a[0], b[0]);
  const double iw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
  if (ih <= 0 || iw <= 0) return 0;
  const double inter = ih * iw;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0 ? inter / uni : 0;
}

static OnyxStatus* nms_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* bt = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* stt = cpu_host->ctx_input(ctx, 1);
  if (cpu_host->tensor_rank(bt) != 3 || cpu_host->tensor_dims(bt)[2] != 4)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "boxes must be [num_batches, spatial_dimension, 4]");
  if (cpu_host->tensor_rank(stt) != 3)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "scores must be [num_batches, num_classes, spatial_dimension]");
  const int64_t* bd = cpu_host->tensor_dims(bt);
  const int64_t* sd = cpu_host->tensor_dims(stt);
  if (sd[0] != bd[0] || sd[2] != bd[1])
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "boxes [%lld,%lld,4] and scores [%lld,%lld,%lld] disagree", (long long)bd[0],
                     (long long)bd[1], (long long)sd[0], (long long)sd[1], (long long)sd[2]);
  const size_t nb = (size_t)bd[0], ns = (size_t)bd[1], nc = (size_t)sd[1];
  double mx = 0, iou_th = 0, score_th = 0;
  if (nnop_scalar_d(ctx, 2, &mx) && mx < 0) mx = 0;
  nnop_scalar_d(ctx, 3, &iou_th);
  const bool has_score_th = nnop_scalar_d(ctx, 4, &score_th);
  const int64_t cpb = cpu_host->node_attr_int(node, "center_point_box", 0);
  if (cpb != 0 && cpb != 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "center_point_box must be 0 or 1, got %lld",
                     (long long)cpb);
  const size_t max_out = mx > (double)ns ? ns : (size_t)mx;
  OnyxStatus* st;
  double *bv, *sv, *boxes;
  NmsCand* cand;
  size_t* keep;
  int64_t* sel;
  const size_t cap = nb * nc * max_out;
  if ((st = nnop_load_d(ctx, bt, &bv)) || (st = nnop_load_d(ctx, stt, &sv)) ||
      (st = nnop_scratch(ctx, ns * 4 * sizeof(double), (void**)&boxes)) ||
      (st = nnop_scratch(ctx, ns * sizeof(NmsCand), (void**)&cand)) ||
      (st = nnop_scratch(ctx, ns * sizeof(size_t), (void**)&keep)) ||
      (st = nnop_scratch(ctx, cap * 3 * sizeof(int64_t), (void**)&sel)))
    return st;
  size_t count = 0;
  /* up to ns^2 overlap tests per class: polled per candidate */
  CpuStop stop = {.ctx = ctx};
  size_t polled = 0;
  for (size_t b = 0; b < nb && max_out > 0; b++) {
    for (size_t i = 0; i < ns; i++)
      nms_box(bv + (b * ns + i) * 4, cpb == 1, boxes + i * 4);
    for (size_t c = 0; c < nc; c++) {
      size_t nk = 0, kept = 0;
      for (size_t i = 0; i < ns; i++) {
        const double sc = sv[(b * nc + c) * ns + i];
        if (has_score_th && !(sc > score_th)) continue;
        cand[nk].score = sc;
        cand[nk++].index = (int64_t)i;
      }
      qsort(cand, nk, sizeof *cand, nms_cmp);
      for (size_t i = 0; i < nk && kept < max_out; i++) {
        if (cpu_stop_poll(&stop, &polled, kept + 1)) return cpu_cancelled(ctx, NULL);
        const double* bx = boxes + cand[i].index * 4;
        bool ok = true;
        for (size_t k = 0; k < kept && ok; k++)
          if (nms_iou(bx, boxes + keep[k] * 4) > iou_th) ok = false;
        if (!ok) continue;
        keep[kept++] = (size_t)cand[i].index;
        sel[count * 3] = (int64_t)b;
        sel[count * 3 + 1] = (int64_t)c;
        sel[count * 3 + 2] = cand[i].index;
        count++;
      }
    }
  }
  const int64_t od[2] = {(int64_t)count, 3};
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 2, &y))) return st;
  cpu_memcpy(cpu_host->tensor_mutable_data(y), sel, count * 3 * sizeof(int64_t));
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

OnyxStatus* cpu_register_nms(OnyxKernelRegistry* r) {
  const CpuKernelSpec specs[] = {
      {"NonMaxSuppression", 10, ONYX_OPSET_LATEST, NULL, 0, nnop_node_create, nms_compute, NULL,
       NULL},
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}

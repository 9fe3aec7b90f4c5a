/* cpu_stateful_seq.c — the state-carrying sequence ops of opsets 27/28:
 * LinearAttention, CausalConvWithState (27) and SwiGLU (28).
 *
 * LinearAttention keeps a state S of [B, Hkv, Dk, Dv] (zeros, or past_state)
 * and walks the sequence; per step t, with k, v, q, decay, beta of that step:
 *   gated rules:   S = S * exp(decay)        (decay per key dim, or per head)
 *   delta rules:   S = S + k (beta * (v - S^T k))^T
 *   linear/gated:  S = S + k v^T
 *   output:        o = scale * q^T S          (query head h reads state h / (Hq/Hkv))
 * update_rule is "linear", "gated", "delta" or "gated_delta" (the default).
 * Q/K/V are [B, T, heads * size]; the output is [B, T, Hq * Dv] and
 * present_state the final S. Computed in float32.
 *
 * CausalConvWithState is a depthwise 1-D convolution over [B, C, L] with a
 * [C, 1, K] kernel whose left context is past_state ([B, C, K-1], zeros when
 * absent): output[l] = sum_k w[k] * padded[l + k] (+ bias), optionally
 * followed by SiLU ("silu" or "swish"); present_state is the last K-1 steps of
 * the padded input.
 *
 * SwiGLU: y = a * sigmoid(alpha * a) * b. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

/* --- LinearAttention ------------------------------------------------------------------------ */

typedef struct LinState {
  int64_t hq, hkv;
  float scale;
  bool gated, delta;
} LinState;

static OnyxStatus* lin_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  LinState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->hq = H->node_attr_int(node, "q_num_heads", 0);
  s->hkv = H->node_attr_int(node, "kv_num_heads", 0);
  s->scale = H->node_attr_float(node, "scale", 0.0f);
  size_t len = 0;
  const char* rule = H->node_attr_string(node, "update_rule", &len);
  if (!rule) rule = "gated_delta";
  s->gated = !strcmp(rule, "gated") || !strcmp(rule, "gated_delta");
  s->delta = !strcmp(rule, "delta") || !strcmp(rule, "gated_delta");
  OnyxStatus* st = NULL;
  if (!s->gated && !s->delta && strcmp(rule, "linear"))
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "update_rule '%s' is not linear, gated, delta or gated_delta", rule);
  else if (s->hq <= 0 || s->hkv <= 0 || s->hq % s->hkv)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "q_num_heads (%lld) must be a positive multiple of kv_num_heads (%lld)",
                   (long long)s->hq, (long long)s->hkv);
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return NULL;
}

static OnyxStatus* lin_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const LinState* s = state;
  size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* in[6] = {0};
  for (size_t i = 0; i < n_in && i < 6; i++)
    in[i] = H->ctx_input(ctx, i);
  for (int i = 0; i < 3; i++)
    if (H->tensor_rank(in[i]) != 3)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "query/key/value must be [B, T, heads*size]");
  const int64_t *qd = H->tensor_dims(in[0]), *kd = H->tensor_dims(in[1]),
                *vd = H->tensor_dims(in[2]);
  int64_t B = qd[0], T = qd[1];
  if (kd[0] != B || vd[0] != B || kd[1] != T || vd[1] != T || qd[2] % s->hq || kd[2] % s->hkv ||
      vd[2] % s->hkv || qd[2] / s->hq != kd[2] / s->hkv)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "query [%lld,%lld,%lld], key [%lld,%lld,%lld] and value "
                         "[%lld,%lld,%lld] do not fit %lld query and %lld key/value heads",
                         (long long)qd[0], (long long)qd[1], (long long)qd[2], (long long)kd[0],
                         (long long)kd[1], (long long)kd[2], (long long)vd[0], (long long)vd[1],
                         (long long)vd[2], (long long)s->hq, (long long)s->hkv);
  int64_t Hq = s->hq, Hkv = s->hkv, Dk = kd[2] / Hkv, Dv = vd[2] / Hkv, G = Hq / Hkv;
  const float *Q, *K, *V, *P = NULL, *Dec = NULL, *Beta = NULL;
  OnyxStatus* e = cpu_f32_input(ctx, in[0], "query", &Q);
  if (!e) e = cpu_f32_input(ctx, in[1], "key", &K);
  if (!e) e = cpu_f32_input(ctx, in[2], "value", &V);
  if (e) return e;
  int64_t dec_w = 0, beta_w = 0; /* per-step widths: Hkv*Dk or Hkv; Hkv or 1 */
  if (in[3]) {
    const int64_t* pd = H->tensor_dims(in[3]);
    if (H->tensor_rank(in[3]) != 4 || pd[0] != B || pd[1] != Hkv || pd[2] != Dk || pd[3] != Dv)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "past_state must be [%lld, %lld, %lld, %lld]", (long long)B,
                           (long long)Hkv, (long long)Dk, (long long)Dv);
    if ((e = cpu_f32_input(ctx, in[3], "past_state", &P))) return e;
  }
  if (s->gated) {
    if (!in[4]) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "a gated update_rule needs decay");
    const int64_t* dd = H->tensor_dims(in[4]);
    dec_w = H->tensor_rank(in[4]) == 3 && dd[0] == B && dd[1] == T ? dd[2] : -1;
    if (dec_w != Hkv * Dk && dec_w != Hkv)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "decay must be [B, T, %lld] (per key dim) or [B, T, %lld] (per head)",
                           (long long)(Hkv * Dk), (long long)Hkv);
    if ((e = cpu_f32_input(ctx, in[4], "decay", &Dec))) return e;
  }
  if (s->delta) {
    if (!in[5]) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "a delta update_rule needs beta");
    const int64_t* bd = H->tensor_dims(in[5]);
    beta_w = H->tensor_rank(in[5]) == 3 && bd[0] == B && bd[1] == T ? bd[2] : -1;
    if (beta_w != Hkv && beta_w != 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "beta must be [B, T, %lld] or [B, T, 1]",
                           (long long)Hkv);
    if ((e = cpu_f32_input(ctx, in[5], "beta", &Beta))) return e;
  }
  size_t n_state = (size_t)(B * Hkv * Dk * Dv);
  float* S = H->ctx_scratch(ctx, (n_state ? n_state : 1) * sizeof *S);
  float* O = H->ctx_scratch(ctx, ((size_t)(B * T * Hq * Dv) + 1) * sizeof *O);
  float* tmp = H->ctx_scratch(ctx, ((size_t)Dv + 1) * sizeof *tmp);
  if (!S || !O || !tmp) return cpu_oom(ctx);
  if (P)
    cpu_memcpy(S, P, n_state * sizeof *S);
  else
    memset(S, 0, n_state * sizeof *S);
  float scale = s->scale != 0.0f ? s->scale : 1.0f / sqrtf((float)Dk);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      for (int64_t h = 0; h < Hkv; h++) {
        float* st = S + (b * Hkv + h) * Dk * Dv;
        const float* k = K + (b * T + t) * Hkv * Dk + h * Dk;
        const float* v = V + (b * T + t) * Hkv * Dv + h * Dv;
        if (s->gated) {
          const float* dec = Dec + (b * T + t) * dec_w;
          for (int64_t i = 0; i < Dk; i++) {
            float g = expf(dec_w == Hkv ? dec[h] : dec[h * Dk + i]);
            for (int64_t j = 0; j < Dv; j++)
              st[i * Dv + j] *= g;
          }
        }
        if (s->delta) { /* write beta * (v - S^T k) along k */
          float beta = Beta[(b * T + t) * beta_w + (beta_w == 1 ? 0 : h)];
          for (int64_t j = 0; j < Dv; j++) {
            float r = 0;
            for (int64_t i = 0; i < Dk; i++)
              r += st[i * Dv + j] * k[i];
            tmp[j] = beta * (v[j] - r);
          }
        } else {
          cpu_memcpy(tmp, v, (size_t)Dv * sizeof *tmp);
        }
        for (int64_t i = 0; i < Dk; i++)
          for (int64_t j = 0; j < Dv; j++)
            st[i * Dv + j] += k[i] * tmp[j];
      }
      for (int64_t h = 0; h < Hq; h++) {
        const float* st = S + (b * Hkv + h / G) * Dk * Dv;
        const float* q = Q + (b * T + t) * Hq * Dk + h * Dk;
        float* o = O + (b * T + t) * Hq * Dv + h * Dv;
        for (int64_t j = 0; j < Dv; j++) {
          float acc = 0;
          for (int64_t i = 0; i < Dk; i++)
            acc += q[i] * st[i * Dv + j];
          o[j] = scale * acc;
        }
      }
    }
  int64_t od[3] = {B, T, Hq * Dv}, sd[4] = {B, Hkv, Dk, Dv};
  if ((e = cpu_f32_output(ctx, 0, od, 3, O))) return e;
  return cpu_f32_output(ctx, 1, sd, 4, S);
}

/* --- CausalConvWithState ---------------------------------------------------------------------- */

static OnyxStatus* ccs_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  size_t len = 0;
  const char* act = cpu_host->node_attr_string(node, "activation", &len);
  int* silu = malloc(sizeof *silu);
  if (!silu) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *silu = act && (!strcmp(act, "silu") || !strcmp(act, "swish"));
  if (act && !*silu && strcmp(act, "none")) {
    free(silu);
    return cpu_error(node, ONYX_INVALID_MODEL, "activation '%s' is not none, silu or swish", act);
  }
  *out = silu;
  return NULL;
}

static OnyxStatus* ccs_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  bool silu = *(const int*)state != 0;
  size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  const OnyxTensor* w = H->ctx_input(ctx, 1);
  const OnyxTensor* bias = n_in > 2 ? H->ctx_input(ctx, 2) : NULL;
  const OnyxTensor* past = n_in > 3 ? H->ctx_input(ctx, 3) : NULL;
  const int64_t *xd = H->tensor_dims(x), *wd = H->tensor_dims(w);
  if (H->tensor_rank(x) != 3 || H->tensor_rank(w) != 3 || wd[0] != xd[1] || wd[1] != 1 || wd[2] < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "input must be [B, C, L] and weight [C, 1, K] (depthwise)");
  int64_t B = xd[0], C = xd[1], L = xd[2], Kw = wd[2], P = Kw - 1;
  if (bias && H->tensor_elem_count(bias) != (size_t)C)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "bias must have %lld values", (long long)C);
  if (past) {
    const int64_t* pd = H->tensor_dims(past);
    if (H->tensor_rank(past) != 3 || pd[0] != B || pd[1] != C || pd[2] != P)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "past_state must be [%lld, %lld, %lld]",
                           (long long)B, (long long)C, (long long)P);
  }
  const float *X, *W, *Bi = NULL, *Ps = NULL;
  OnyxStatus* e = cpu_f32_input(ctx, x, "input", &X);
  if (!e) e = cpu_f32_input(ctx, w, "weight", &W);
  if (!e && bias) e = cpu_f32_input(ctx, bias, "bias", &Bi);
  if (!e && past) e = cpu_f32_input(ctx, past, "past_state", &Ps);
  if (e) return e;
  size_t padded_len = (size_t)(P + L);
  float* pad = H->ctx_scratch(ctx, (padded_len + 1) * sizeof *pad);
  float* Y = H->ctx_scratch(ctx, ((size_t)(B * C * L) + 1) * sizeof *Y);
  float* S = H->ctx_scratch(ctx, ((size_t)(B * C * P) + 1) * sizeof *S);
  if (!pad || !Y || !S) return cpu_oom(ctx);
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      if (Ps)
        cpu_memcpy(pad, Ps + (b * C + c) * P, (size_t)P * sizeof *pad);
      else
        memset(pad, 0, (size_t)P * sizeof *pad);
      cpu_memcpy(pad + P, X + (b * C + c) * L, (size_t)L * sizeof *pad);
      const float* wk = W + c * Kw;
      float* y = Y + (b * C + c) * L;
      for (int64_t l = 0; l < L; l++) {
        float acc = Bi ? Bi[c] : 0.0f;
        for (int64_t k = 0; k < Kw; k++)
          acc += wk[k] * pad[l + k];
        y[l] = silu ? acc / (1.0f + expf(-acc)) : acc;
      }
      cpu_memcpy(S + (b * C + c) * P, pad + L, (size_t)P * sizeof *S);
    }
  int64_t sd[3] = {B, C, P};
  if ((e = cpu_f32_output(ctx, 0, xd, 3, Y))) return e;
  return cpu_f32_output(ctx, 1, sd, 3, S);
}

/* --- SwiGLU ----------------------------------------------------------------------------------- */

typedef struct SwiGluRun {
  const float *a, *b;
  float* y;
  float alpha;
} SwiGluRun;

static void swiglu_row(void* user, const int64_t* in_off, const int64_t* in_step, size_t out_off,
                       size_t len) {
  SwiGluRun* r = user;
  for (size_t i = 0; i < len; i++) {
    float a = r->a[in_off[0] + (int64_t)i * in_step[0]];
    float b = r->b[in_off[1] + (int64_t)i * in_step[1]];
    r->y[out_off + i] = a / (1.0f + expf(-r->alpha * a)) * b;
  }
}

static OnyxStatus* swiglu_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  float* alpha = malloc(sizeof *alpha);
  if (!alpha) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *alpha = cpu_host->node_attr_float(node, "alpha", 1.0f);
  *out = alpha;
  return NULL;
}

static OnyxStatus* swiglu_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const OnyxTensor* a = H->ctx_input(ctx, 0);
  const OnyxTensor* b = H->ctx_input(ctx, 1);
  const int64_t* dims[2] = {H->tensor_dims(a), H->tensor_dims(b)};
  size_t ranks[2] = {H->tensor_rank(a), H->tensor_rank(b)};
  if (ranks[0] > CPU_MAX_RANK || ranks[1] > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "rank above %d", CPU_MAX_RANK);
  int64_t od[CPU_MAX_RANK];
  size_t orank = 0;
  OnyxStatus* e = cpu_bcast_shape(ctx, 2, dims, ranks, od, &orank);
  SwiGluRun r = {.alpha = *(const float*)state};
  if (!e) e = cpu_f32_input(ctx, a, "a", &r.a);
  if (!e) e = cpu_f32_input(ctx, b, "b", &r.b);
  if (e) return e;
  size_t n = cpu_dims_product(od, 0, orank);
  r.y = H->ctx_scratch(ctx, (n + 1) * sizeof *r.y);
  if (!r.y) return cpu_oom(ctx);
  CpuBcast plan;
  cpu_bcast_plan(&plan, od, orank, 2, dims, ranks);
  cpu_bcast_run(&plan, swiglu_row, &r);
  return cpu_f32_output(ctx, 0, od, orank, r.y);
}

/* --- Registration ----------------------------------------------------------------------------- */

static const int32_t rec_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16,
                                    ONYX_ELEM_FLOAT64};
static const OnyxTypeConstraint rec_tc[] = {{"T", rec_types, CPU_ARRAY_LEN(rec_types)}};

static const CpuKernelSpec recurrent_specs[] = {
    {"LinearAttention", 27, ONYX_OPSET_LATEST, rec_tc, 1, lin_create, lin_compute, cpu_free_state,
     NULL},
    {"CausalConvWithState", 27, ONYX_OPSET_LATEST, rec_tc, 1, ccs_create, ccs_compute,
     cpu_free_state, NULL},
    {"SwiGLU", 28, ONYX_OPSET_LATEST, rec_tc, 1, swiglu_create, swiglu_compute, cpu_free_state,
     NULL},
};

OnyxStatus* cpu_register_recurrent(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, recurrent_specs, CPU_ARRAY_LEN(recurrent_specs));
}

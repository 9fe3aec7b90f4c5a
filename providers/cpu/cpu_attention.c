/* cpu_attention.c — Attention (opset 23, 24) and RotaryEmbedding (opset 23).
 *
 * Attention follows the op's function body step by step, fused into one pass
 * per query row (b, head, i), computed in float32 whatever the input type
 * (float16, bfloat16 and double are converted on the way in and out):
 *
 *   s_j   = scale * <q_i, k_j>                       qk_matmul_output mode 0
 *   s_j   = softcap * tanh(s_j / softcap)  (softcap > 0)                 mode 1
 *   s_j  += bias_j  (attn_mask, is_causal, nonpad_kv_seqlen)             mode 2
 *   p     = softmax(s), or 0 where every bias_j of the row is -inf       mode 3
 *   y_i   = sum_j p_j v_j
 *
 * k and v are the present key/value: past_key/past_value followed by K/V,
 * both also outputs. Query head h reads key/value head h / (Hq / Hkv) (GQA,
 * MQA). A boolean mask adds 0 where true and -inf where false; a float mask
 * is added as is; both broadcast to [B, Hq, Sq, T] and a mask shorter than the
 * total key length T is padded with -inf. is_causal masks key j for query i
 * when j > i + offset, offset being the past length (or, with
 * nonpad_kv_seqlen, that length minus Sq per batch); nonpad_kv_seqlen also
 * masks the keys past it. 3-D Q/K/V are [B, S, heads * size] and need the
 * q_num_heads / kv_num_heads attributes; Y is then 3-D too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

/* --- Attention ----------------------------------------------------------------------------------
 */

typedef struct AttnState {
  int64_t q_heads, kv_heads;
  int64_t mode;
  float scale; /* 0: 1/sqrt(head size) */
  float softcap;
  bool causal;
} AttnState;

static OnyxStatus* attn_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  AttnState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->q_heads = H->node_attr_int(node, "q_num_heads", 0);
  s->kv_heads = H->node_attr_int(node, "kv_num_heads", 0);
  s->mode = H->node_attr_int(node, "qk_matmul_output_mode", 0);
  s->scale = H->node_attr_float(node, "scale", 0.0f);
  s->softcap = H->node_attr_float(node, "softcap", 0.0f);
  s->causal = H->node_attr_int(node, "is_causal", 0) != 0;
  OnyxStatus* st = NULL;
  if (s->mode < 0 || s->mode > 3)
    st = cpu_error(node, ONYX_INVALID_MODEL, "qk_matmul_output_mode %lld is not 0, 1, 2 or 3",
                   (long long)s->mode);
  else if (s->q_heads < 0 || s->kv_heads < 0)
    st = cpu_error(node, ONYX_INVALID_MODEL, "q_num_heads/kv_num_heads must not be negative");
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* Shape of one of Q, K, V seen as [B, heads, S, size], with element strides. */
typedef struct Bhsd {
  int64_t b, h, s, d;
  int64_t sb, sh, ss; /* strides of b, h, s (d is contiguous) */
} Bhsd;

static OnyxStatus* read_bhsd(OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                             int64_t heads_attr, const char* attr, Bhsd* out) {
  size_t rank = cpu_host->tensor_rank(t);
  const int64_t* d = cpu_host->tensor_dims(t);
  if (rank == 4) {
    *out = (Bhsd){d[0], d[1], d[2], d[3], d[1] * d[2] * d[3], d[2] * d[3], d[3]};
    return NULL;
  }
  if (rank != 3)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s has rank %zu; Attention wants 3 or 4",
                         what, rank);
  if (heads_attr <= 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_MODEL, "%s is 3-D, which needs the attribute %s", what,
                         attr);
  if (d[2] % heads_attr)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "%s's last dim %lld is not a multiple of %s = %lld", what, (long long)d[2],
                         attr, (long long)heads_attr);
  int64_t size = d[2] / heads_attr;
  *out = (Bhsd){d[0], heads_attr, d[1], size, d[1] * d[2], size, d[2]};
  return NULL;
}

/* The additive mask broadcast onto [B, Hq, Sq, T]: element strides per dim
 * (0 where broadcast) and its own key length (<= T; the rest is -inf). */
typedef struct MaskView {
  const void* data;
  int32_t type;
  bool is_bool;
  const float* f; /* float form when not bool */
  int64_t stride[4];
  int64_t len; /* mask's last dim */
} MaskView;

static OnyxStatus* read_mask(OnyxKernelContext* ctx, const OnyxTensor* t, const int64_t target[4],
                             MaskView* m) {
  const OnyxHostApi* H = cpu_host;
  size_t rank = H->tensor_rank(t);
  const int64_t* d = H->tensor_dims(t);
  if (rank < 1 || rank > 4)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "attn_mask has rank %zu; want 1 to 4", rank);
  int64_t dims[4] = {1, 1, 1, 1};
  for (size_t k = 0; k < rank; k++)
    dims[4 - rank + k] = d[k];
  m->len = dims[3];
  if (m->len > target[3])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "attn_mask's last dim %lld is longer than the key length %lld",
                         (long long)m->len, (long long)target[3]);
  int64_t stride = 1;
  for (int k = 3; k >= 0; k--) {
    if (k < 3 && dims[k] != 1 && dims[k] != target[k])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "attn_mask dim %d is %lld, which does not broadcast to %lld", k,
                           (long long)dims[k], (long long)target[k]);
    m->stride[k] = dims[k] == 1 ? 0 : stride;
    stride *= dims[k];
  }
  m->type = H->tensor_elem_type(t);
  m->is_bool = m->type == ONYX_ELEM_BOOL;
  m->data = H->tensor_data(t);
  if (!m->is_bool) return cpu_f32_input(ctx, t, "attn_mask", &m->f);
  return NULL;
}

typedef struct AttnRun {
  const AttnState* st;
  Bhsd q, k, v;
  int64_t past, total, hq, hkv, d, dv, sq, b;
  const float *Q, *K, *V;
  float *pk, *pv; /* present key/value, [B, Hkv, T, D] and [B, Hkv, T, Dv] */
  const MaskView* mask;
  const int64_t* nonpad; /* [B] or NULL */
  float scale;
  float* y;    /* [B, Hq, Sq, Dv] */
  float* qk;   /* [B, Hq, Sq, T] or NULL */
  float* work; /* T floats per row: the row's scores */
} AttnRun;

static float row_bias(const AttnRun* r, int64_t b, int64_t h, int64_t i, int64_t j) {
  float bias = 0.0f;
  const MaskView* m = r->mask;
  if (m) {
    if (j >= m->len) return -INFINITY;
    int64_t off = b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j * m->stride[3];
    if (m->is_bool)
      bias = ((const uint8_t*)m->data)[off] ? 0.0f : -INFINITY;
    else
      bias = m->f[off];
  }
  if (r->nonpad && j >= r->nonpad[b]) return -INFINITY;
  if (r->st->causal) {
    int64_t offset = r->nonpad ? r->nonpad[b] - r->sq : r->past;
    if (j > i + offset) return -INFINITY;
  }
  return bias;
}

static void attn_rows(void* user, size_t begin, size_t end) {
  const AttnRun* r = user;
  int64_t T = r->total;
  for (size_t row = begin; row < end; row++) {
    float* s = r->work + (int64_t)row * T;
    int64_t i = (int64_t)row % r->sq;
    int64_t h = ((int64_t)row / r->sq) % r->hq;
    int64_t b = (int64_t)row / (r->sq * r->hq);
    int64_t hk = h / (r->hq / r->hkv);
    const float* q = r->Q + b * r->q.sb + h * r->q.sh + i * r->q.ss;
    const float* pk = r->pk + (b * r->hkv + hk) * T * r->d;
    const float* pv = r->pv + (b * r->hkv + hk) * T * r->dv;
    float* qk = r->qk ? r->qk + (int64_t)row * T : NULL;
    float bias_max = -INFINITY;
    for (int64_t j = 0; j < T; j++) {
      const float* kj = pk + j * r->d;
      float acc = 0.0f;
      for (int64_t c = 0; c < r->d; c++)
        acc += q[c] * kj[c];
      s[j] = acc * r->scale;
      if (qk && r->st->mode == 0) qk[j] = s[j];
      if (r->st->softcap > 0.0f) s[j] = r->st->softcap * tanhf(s[j] / r->st->softcap);
      if (qk && r->st->mode == 1) qk[j] = s[j];
      float bias = row_bias(r, b, h, i, j);
      if (bias > bias_max) bias_max = bias;
      s[j] += bias;
      if (qk && r->st->mode == 2) qk[j] = s[j];
    }
    float* y = r->y + (int64_t)row * r->dv;
    memset(y, 0, (size_t)r->dv * sizeof *y);
    if (bias_max == -INFINITY) { /* every key masked: the row's weights are 0 */
      if (qk && r->st->mode == 3) memset(qk, 0, (size_t)T * sizeof *qk);
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = 0; j < T; j++)
      if (s[j] > mx) mx = s[j];
    float sum = 0.0f;
    for (int64_t j = 0; j < T; j++) {
      s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - mx);
      sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < T; j++) {
      float p = s[j] * inv;
      if (qk && r->st->mode == 3) qk[j] = p;
      if (p == 0.0f) continue;
      const float* vj = pv + j * r->dv;
      for (int64_t c = 0; c < r->dv; c++)
        y[c] += p * vj[c];
    }
  }
}

/* Fills present (as [B, Hkv, T, size]) from past ([B, Hkv, P, size]) and the new keys. */
static void fill_present(float* present, const float* past, const float* cur, const Bhsd* c,
                         int64_t p_len, int64_t total) {
  for (int64_t b = 0; b < c->b; b++)
    for (int64_t h = 0; h < c->h; h++) {
      float* dst = present + (b * c->h + h) * total * c->d;
      if (p_len)
        cpu_memcpy(dst, past + (b * c->h + h) * p_len * c->d, (size_t)(p_len * c->d) * sizeof *dst);
      for (int64_t j = 0; j < c->s; j++)
        cpu_memcpy(dst + (p_len + j) * c->d, cur + b * c->sb + h * c->sh + j * c->ss,
                   (size_t)c->d * sizeof *dst);
    }
}

static OnyxStatus* attn_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const AttnState* st = state;
  size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* in[7] = {0};
  for (size_t i = 0; i < n_in && i < 7; i++)
    in[i] = H->ctx_input(ctx, i);
  AttnRun r = {.st = st};
  OnyxStatus* e = read_bhsd(ctx, in[0], "Q", st->q_heads, "q_num_heads", &r.q);
  if (!e) e = read_bhsd(ctx, in[1], "K", st->kv_heads, "kv_num_heads", &r.k);
  if (!e) e = read_bhsd(ctx, in[2], "V", st->kv_heads, "kv_num_heads", &r.v);
  if (e) return e;
  if (r.q.b != r.k.b || r.q.b != r.v.b || r.k.h != r.v.h || r.k.s != r.v.s || r.q.d != r.k.d)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "Q [%lld,%lld heads,%lld,%lld], K [%lld,%lld heads,%lld,%lld] and V "
                         "[%lld,%lld heads,%lld,%lld] disagree",
                         (long long)r.q.b, (long long)r.q.h, (long long)r.q.s, (long long)r.q.d,
                         (long long)r.k.b, (long long)r.k.h, (long long)r.k.s, (long long)r.k.d,
                         (long long)r.v.b, (long long)r.v.h, (long long)r.v.s, (long long)r.v.d);
  if (r.k.h == 0 || r.q.h % r.k.h)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "%lld query heads are not a multiple of %lld key/value heads",
                         (long long)r.q.h, (long long)r.k.h);
  r.b = r.q.b;
  r.hq = r.q.h;
  r.hkv = r.k.h;
  r.sq = r.q.s;
  r.d = r.q.d;
  r.dv = r.v.d;
  const OnyxTensor *past_k = in[4], *past_v = in[5];
  if (!past_k != !past_v)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "past_key and past_value come together");
  if (past_k) {
    const int64_t* pkd = H->tensor_dims(past_k);
    const int64_t* pvd = H->tensor_dims(past_v);
    if (H->tensor_rank(past_k) != 4 || H->tensor_rank(past_v) != 4 || pkd[0] != r.b ||
        pkd[1] != r.hkv || pkd[3] != r.d || pvd[0] != r.b || pvd[1] != r.hkv || pvd[2] != pkd[2] ||
        pvd[3] != r.dv)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "past_key/past_value must be [B=%lld, %lld heads, P, %lld/%lld]",
                           (long long)r.b, (long long)r.hkv, (long long)r.d, (long long)r.dv);
    r.past = pkd[2];
  }
  r.total = r.past + r.k.s;
  const float *pk_in = NULL, *pv_in = NULL;
  e = cpu_f32_input(ctx, in[0], "Q", &r.Q);
  if (!e) e = cpu_f32_input(ctx, in[1], "K", &r.K);
  if (!e) e = cpu_f32_input(ctx, in[2], "V", &r.V);
  if (!e && past_k) e = cpu_f32_input(ctx, past_k, "past_key", &pk_in);
  if (!e && past_v) e = cpu_f32_input(ctx, past_v, "past_value", &pv_in);
  if (e) return e;
  int64_t target[4] = {r.b, r.hq, r.sq, r.total};
  MaskView mask;
  if (in[3]) {
    if ((e = read_mask(ctx, in[3], target, &mask))) return e;
    r.mask = &mask;
  }
  if (in[6]) {
    if (H->tensor_elem_type(in[6]) != ONYX_ELEM_INT64 || H->tensor_elem_count(in[6]) != (size_t)r.b)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "nonpad_kv_seqlen must be int64 [%lld]",
                           (long long)r.b);
    r.nonpad = H->tensor_data(in[6]);
  }
  size_t n_pk = (size_t)(r.b * r.hkv * r.total * r.d),
         n_pv = (size_t)(r.b * r.hkv * r.total * r.dv);
  size_t rows = (size_t)(r.b * r.hq * r.sq);
  r.pk = H->ctx_scratch(ctx, (n_pk ? n_pk : 1) * sizeof(float));
  r.pv = H->ctx_scratch(ctx, (n_pv ? n_pv : 1) * sizeof(float));
  r.y = H->ctx_scratch(ctx, (rows * (size_t)r.dv + 1) * sizeof(float));
  bool want_qk =
      H->ctx_output_count(ctx) > 3 && (!H->ctx_node(ctx) || H->node_output(H->ctx_node(ctx), 3));
  if (want_qk) r.qk = H->ctx_scratch(ctx, (rows * (size_t)r.total + 1) * sizeof(float));
  r.work = H->ctx_scratch(ctx, (rows * (size_t)r.total + 1) * sizeof(float));
  if (!r.pk || !r.pv || !r.y || !r.work || (want_qk && !r.qk)) return cpu_oom(ctx);
  fill_present(r.pk, pk_in, r.K, &r.k, r.past, r.total);
  fill_present(r.pv, pv_in, r.V, &r.v, r.past, r.total);
  r.scale = st->scale != 0.0f ? st->scale : 1.0f / sqrtf((float)r.d);
  /* Rows are independent: split them over the session's pool. */
  H->parallel_for(H->ctx_thread_pool(ctx), rows, attn_rows, &r);

  bool three_d = H->tensor_rank(in[0]) == 3;
  float* y = r.y;
  int64_t ydims[4] = {r.b, r.hq, r.sq, r.dv};
  size_t yrank = 4;
  if (three_d) { /* [B, Hq, Sq, Dv] -> [B, Sq, Hq * Dv] */
    y = H->ctx_scratch(ctx, (rows * (size_t)r.dv + 1) * sizeof(float));
    if (!y) return cpu_oom(ctx);
    for (int64_t b = 0; b < r.b; b++)
      for (int64_t h = 0; h < r.hq; h++)
        for (int64_t i = 0; i < r.sq; i++)
          cpu_memcpy(y + ((b * r.sq + i) * r.hq + h) * r.dv,
                     r.y + ((b * r.hq + h) * r.sq + i) * r.dv, (size_t)r.dv * sizeof *y);
    ydims[1] = r.sq;
    ydims[2] = r.hq * r.dv;
    yrank = 3;
  }
  int64_t kdims[4] = {r.b, r.hkv, r.total, r.d}, vdims[4] = {r.b, r.hkv, r.total, r.dv};
  int64_t qkdims[4] = {r.b, r.hq, r.sq, r.total};
  if ((e = cpu_f32_output(ctx, 0, ydims, yrank, y))) return e;
  if ((e = cpu_f32_output(ctx, 1, kdims, 4, r.pk))) return e;
  if ((e = cpu_f32_output(ctx, 2, vdims, 4, r.pv))) return e;
  if (want_qk && (e = cpu_f32_output(ctx, 3, qkdims, 4, r.qk))) return e;
  return NULL;
}

/* --- RotaryEmbedding -------------------------------------------------------------------------- */

typedef struct RopeState {
  bool interleaved;
  int64_t heads, rot_dim;
} RopeState;

static OnyxStatus* rope_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  RopeState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->interleaved = cpu_host->node_attr_int(node, "interleaved", 0) != 0;
  s->heads = cpu_host->node_attr_int(node, "num_heads", 0);
  s->rot_dim = cpu_host->node_attr_int(node, "rotary_embedding_dim", 0);
  *out = s;
  return NULL;
}

static OnyxStatus* rope_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const RopeState* st = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  const OnyxTensor* cosc = H->ctx_input(ctx, 1);
  const OnyxTensor* sinc = H->ctx_input(ctx, 2);
  const OnyxTensor* pos = H->ctx_input_count(ctx) > 3 ? H->ctx_input(ctx, 3) : NULL;
  size_t rank = H->tensor_rank(x);
  const int64_t* xd = H->tensor_dims(x);
  Bhsd g; /* x as [B, heads, S, D] */
  if (rank == 4) {
    g = (Bhsd){xd[0], xd[1], xd[2], xd[3], xd[1] * xd[2] * xd[3], xd[2] * xd[3], xd[3]};
  } else if (rank == 3) {
    if (st->heads <= 0 || xd[2] % st->heads)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "a 3-D input needs num_heads dividing its last dim %lld (num_heads = "
                           "%lld)",
                           (long long)xd[2], (long long)st->heads);
    int64_t d = xd[2] / st->heads;
    g = (Bhsd){xd[0], st->heads, xd[1], d, xd[1] * xd[2], d, xd[2]};
  } else {
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input has rank %zu; want 3 or 4", rank);
  }
  int64_t rd = st->rot_dim > 0 ? st->rot_dim : g.d;
  if (rd > g.d || rd % 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "rotary_embedding_dim %lld must be even and at most the head size %lld",
                         (long long)rd, (long long)g.d);
  int64_t half = rd / 2;
  const int64_t* cd = H->tensor_dims(cosc);
  size_t crank = H->tensor_rank(cosc);
  const int64_t* sd = H->tensor_dims(sinc);
  if (crank != H->tensor_rank(sinc) || memcmp(cd, sd, crank * sizeof *cd))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cos_cache and sin_cache differ in shape");
  int64_t cache_w = crank ? cd[crank - 1] : 0;
  if ((pos && crank != 2) || (!pos && crank != 3) || cache_w < half)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "cos_cache must be [max_position, >= %lld] with position_ids, or [B, S, "
                         ">= %lld] without",
                         (long long)half, (long long)half);
  if (!pos && (cd[0] != g.b || cd[1] != g.s))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cos_cache [%lld,%lld,...] is not [B, S, ...]",
                         (long long)cd[0], (long long)cd[1]);
  const int64_t* pid = NULL;
  if (pos) {
    size_t np = H->tensor_elem_count(pos);
    if (H->tensor_elem_type(pos) != ONYX_ELEM_INT64 || np != (size_t)(g.b * g.s))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "position_ids must be int64 [B, S] = %lld values, got %zu of %s",
                           (long long)(g.b * g.s), np, cpu_elem_name(H->tensor_elem_type(pos)));
    pid = H->tensor_data(pos);
    for (size_t i = 0; i < np; i++)
      if (pid[i] < 0 || pid[i] >= cd[0])
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "position_ids[%zu] = %lld is outside the cache's %lld positions", i,
                             (long long)pid[i], (long long)cd[0]);
  }
  const float *X, *C, *S;
  OnyxStatus* e = cpu_f32_input(ctx, x, "input", &X);
  if (!e) e = cpu_f32_input(ctx, cosc, "cos_cache", &C);
  if (!e) e = cpu_f32_input(ctx, sinc, "sin_cache", &S);
  if (e) return e;
  size_t n = H->tensor_elem_count(x);
  float* Y = H->ctx_scratch(ctx, (n ? n : 1) * sizeof *Y);
  if (!Y) return cpu_oom(ctx);
  cpu_memcpy(Y, X, n * sizeof *Y); /* the part past rd passes through */
  for (int64_t b = 0; b < g.b; b++)
    for (int64_t h = 0; h < g.h; h++)
      for (int64_t s = 0; s < g.s; s++) {
        int64_t crow = pos ? pid[b * g.s + s] : b * g.s + s;
        const float* c = C + crow * cache_w;
        const float* sn = S + crow * cache_w;
        int64_t off = b * g.sb + h * g.sh + s * g.ss;
        const float* xi = X + off;
        float* yi = Y + off;
        for (int64_t k = 0; k < half; k++) {
          int64_t i1 = st->interleaved ? 2 * k : k, i2 = st->interleaved ? 2 * k + 1 : k + half;
          float x1 = xi[i1], x2 = xi[i2];
          yi[i1] = x1 * c[k] - x2 * sn[k];
          yi[i2] = x2 * c[k] + x1 * sn[k];
        }
      }
  return cpu_f32_output(ctx, 0, xd, rank, Y);
}

/* --- Registration ------------------------------------------------------------------------------
 */

static const int32_t attn_float_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16,
                                           ONYX_ELEM_FLOAT64};
static const int32_t attn_mask_types[] = {ONYX_ELEM_BOOL, ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT16,
                                          ONYX_ELEM_BFLOAT16, ONYX_ELEM_FLOAT64};
static const OnyxTypeConstraint attn_tc[] = {
    {"T1", attn_float_types, CPU_ARRAY_LEN(attn_float_types)},
    {"T2", attn_float_types, CPU_ARRAY_LEN(attn_float_types)},
    {"U", attn_mask_types, CPU_ARRAY_LEN(attn_mask_types)},
};
static const OnyxTypeConstraint rope_tc[] = {
    {"T", attn_float_types, CPU_ARRAY_LEN(attn_float_types)},
    {"M", cpu_types_int64, CPU_ARRAY_LEN(cpu_types_int64)},
};

static const CpuKernelSpec attention_specs[] = {
    {"Attention", 23, ONYX_OPSET_LATEST, attn_tc, CPU_ARRAY_LEN(attn_tc), attn_create, attn_compute,
     cpu_free_state, NULL},
    {"RotaryEmbedding", 23, ONYX_OPSET_LATEST, rope_tc, CPU_ARRAY_LEN(rope_tc), rope_create,
     rope_compute, cpu_free_state, NULL},
};

OnyxStatus* cpu_register_attention(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, attention_specs, CPU_ARRAY_LEN(attention_specs));
}

/* cmd_train.c — `onyx train`: trains a model on .npy data with the training
 * API (onyx_training.h): artifacts generated into a temporary folder, one
 * train step + optimizer step per batch, a JSON line per step in --log,
 * evaluation on held-out data, checkpoints and an exported inference model.
 * docs/cli.md ("onyx train") is the reference. */
#include "cli_util.h"
#include "npy.h"

#include <onyx/onyx_distributed.h>
#include <onyx/onyx_training.h>

#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/ox_checked.h"

/* The seed of the shuffled batch order when neither --seed nor --no-shuffle is given. */
enum { kDefaultSeed = 0 };

typedef struct TrainArgs {
  const char* model;
  const char* loss;
  const char* labels;
  const char* optimizer;
  const char* config;
  const char* log;
  const char* save_checkpoint;
  const char* resume;
  const char* export_path;
  const char* eval_labels;
  const char* mixed_precision;
  CliList data, eval_data, dim_list;
  CliDims dims; /* --dim NAME=VALUE */
  int explain;
  int batch, steps, epochs, no_shuffle, seed, threads;
  double lr, momentum, weight_decay;
  int data_parallel, zero_stage, host_allreduce, blocking_allreduce;
  double bucket_mb, collective_timeout;
} TrainArgs;

static const char kTrainHelp[] =
    "Trains MODEL (a .onnx file, or a folder holding model.onnx) on .npy data.\n"
    "The model's first output is the prediction given to the loss; the loss is\n"
    "the mean over the batch. Artifacts (training, eval and optimizer models,\n"
    "checkpoint) are generated into a temporary folder, removed at the end.\n\n"
    "options:\n"
    "  --loss KIND       cross_entropy (labels: int64 class indices [N] or [N,d..]),\n"
    "                    mse, bce_with_logits, l1 (labels: the prediction's shape)\n"
    "  --data NAME=FILE  a .npy array fed to the model input NAME (one per input);\n"
    "                    its first dimension is the sample\n"
    "  --labels FILE     the .npy targets, one row per sample\n"
    "  --batch-size N    samples per step\n"
    "  --steps S         train S steps, or\n"
    "  --epochs E        train E passes over the data (rows/N steps each)\n"
    "  --optimizer KIND  sgd, adamw or lamb (PyTorch's defaults: SGD momentum 0 and\n"
    "                    weight decay 0; AdamW betas 0.9/0.999, eps 1e-8, weight\n"
    "                    decay 0.01; LAMB eps 1e-6, weight decay 0)\n"
    "  --lr X            learning rate\n"
    "  --momentum M      SGD momentum\n"
    "  --mixed-precision none|float16|bfloat16  MatMul, Gemm, Conv and\n"
    "                    ConvTranspose compute in float16/bfloat16, the rest and\n"
    "                    the parameters in float32; float16 adds dynamic loss\n"
    "                    scaling (docs/training.md, \"Mixed precision\")\n"
    "  --weight-decay W  overrides the optimizer's default weight decay\n"
    "  --no-shuffle      batch k is rows [kN, (k+1)N), wrapping each epoch; the\n"
    "                    incomplete last batch of an epoch is dropped\n"
    "  --seed S          shuffle each epoch with seed S (default 0; see docs/cli.md)\n"
    "  --threads N       intra-op threads\n"
    "  --config FILE     provider/session configuration (JSON, docs/config.md)\n"
    "  --log FILE        one JSON object per step: {\"step\":k,\"loss\":..,\"lr\":..,\"ms\":..}\n"
    "                    and per evaluation: {\"eval\":epoch,\"step\":k,\"loss\":..,\n"
    "                    \"accuracy\":..} (accuracy for cross_entropy)\n"
    "  --save-checkpoint DIR  save the checkpoint (with optimizer state) at the end\n"
    "  --resume DIR      start from the checkpoint in DIR (step count, parameters,\n"
    "                    optimizer state); the batch order goes on where it stopped\n"
    "  --export-inference OUT.onnx  write the trained inference model\n"
    "  --eval-data NAME=FILE, --eval-labels FILE  held-out data, evaluated after\n"
    "                    each epoch and at the end\n"
    "  --data-parallel   one rank of a data-parallel run, started by mpirun -np N\n"
    "                    onyx train ... or without mpirun by scripts/onyx-launch.sh N\n"
    "                    onyx train ... (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;\n"
    "                    docs/distributed.md): --batch-size is per rank; global\n"
    "                    batch k is N*B rows, rank r takes its rows [rB, (r+1)B);\n"
    "                    gradients are averaged over the ranks; rank 0 alone\n"
    "                    writes --log (the global batch's loss), the checkpoint,\n"
    "                    the exported model and the summary\n"
    "  --zero-stage Z    0 (default) or 1: ZeRO stage 1 shards the optimizer state\n"
    "                    across the ranks (sgd, adamw)\n"
    "  --bucket-mb M     gradient all-reduce bucket in MiB (default 25; a fraction\n"
    "                    is allowed)\n"
    "  --host-allreduce  average the gradients by host all-reduces before each\n"
    "                    optimizer step instead of AllReduce nodes in the training\n"
    "                    graph\n"
    "  --blocking-allreduce  AllReduce nodes that block, instead of the default\n"
    "                    AllReduceStart/AllReduceWait pairs that overlap each\n"
    "                    bucket's all-reduce with the rest of the backward pass\n"
    "  --collective-timeout SECONDS  how long a collective waits for the other\n"
    "                    ranks before failing (default 300)\n"
    "  --explain         generate the artifacts and print, for the training, eval\n"
    "                    and optimizer sessions, what `onyx partition --explain`\n"
    "                    prints (providers, every node's provider, declines,\n"
    "                    copies, the planned memory peak per device) with the\n"
    "                    batch dimension fixed to --batch-size; then exit without\n"
    "                    training (--data, --labels, --steps/--epochs and --lr\n"
    "                    are optional with it, and not used)\n"
    "  --dim NAME=VALUE  with --explain: also fix the symbolic input dimension\n"
    "                    NAME (e.g. a sequence length) to VALUE (repeatable)\n"
    "\nA summary JSON line goes to stdout; progress to stderr (a bar on a terminal).\n"
    "exit status: 0 ok, 1 runtime error, 2 usage error\n";

/* --- Data sets ---------------------------------------------------------------------- */
typedef struct Column {
  const char* name; /* the model input; points into argv */
  char* file;
  NpyArray arr;
  size_t row_bytes;
} Column;

typedef struct Dataset {
  Column* cols; /* the inputs, then the labels (name NULL) */
  size_t ncols;
  size_t rows;
} Dataset;

static void dataset_free(Dataset* d) {
  for (size_t i = 0; i < d->ncols; i++) {
    npy_free(&d->cols[i].arr);
    free(d->cols[i].file);
  }
  free(d->cols);
  memset(d, 0, sizeof *d);
}

static OnyxElemType elem_type(NpyType t) {
  switch (t) {
  case NPY_FLOAT32:
    return ONYX_ELEM_FLOAT32;
  case NPY_FLOAT64:
    return ONYX_ELEM_FLOAT64;
  case NPY_INT64:
    return ONYX_ELEM_INT64;
  case NPY_INT32:
    return ONYX_ELEM_INT32;
  case NPY_UINT8:
    return ONYX_ELEM_UINT8;
  case NPY_BOOL:
    return ONYX_ELEM_BOOL;
  }
  return ONYX_ELEM_UNDEFINED;
}

static int load_column(Column* c, const char* name, const char* file, CliError* e) {
  char err[512];
  c->name = name;
  c->file = strdup(file);
  if (!c->file) return cli_err(e, "out of memory");
  if (npy_load(file, &c->arr, err, sizeof err)) return cli_err(e, "%s", err);
  if (c->arr.rank < 1) return cli_err(e, "%s: a scalar has no rows (rank 0)", file);
  size_t rest = 1;
  for (size_t i = 1; i < c->arr.rank; i++)
    if (!ox_mul_size(rest, (size_t)c->arr.dims[i], &rest))
      return cli_err(e, "%s: the row size overflows", file);
  if (!ox_mul_size(rest, c->arr.elem_size, &c->row_bytes))
    return cli_err(e, "%s: the row size overflows", file);
  return 0;
}

/* Loads the NAME=FILE arrays of `data` and the labels; every array must
 * have the same number of rows. `what` is "--data" or "--eval-data". */
static int dataset_load(Dataset* d, const CliList* data, const char* labels, const char* what,
                        const char* loss, CliError* e) {
  d->cols = calloc(data->count + 1, sizeof *d->cols);
  if (!d->cols) return cli_err(e, "out of memory");
  for (size_t i = 0; i < data->count; i++) {
    const char* item = data->items[i];
    const char* eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1])
      return cli_err(e, "%s '%s': expected NAME=FILE.npy", what, item);
    for (size_t j = 0; j < i; j++)
      if (!strncmp(d->cols[j].name, item, (size_t)(eq - item)) && d->cols[j].name[eq - item] == '=')
        return cli_err(e, "%s: input '%.*s' given twice", what, (int)(eq - item), item);
    d->ncols++;
    if (load_column(&d->cols[i], item, eq + 1, e)) return -1;
  }
  d->ncols++;
  Column* lab = &d->cols[data->count];
  if (load_column(lab, NULL, labels, e)) return -1;
  lab->name = NULL;
  if (!strcmp(loss, "cross_entropy") && lab->arr.type != NPY_INT64)
    return cli_err(e, "%s: cross_entropy labels must be int64 class indices ('<i8'), not '%s'",
                   labels, npy_descr(lab->arr.type));
  d->rows = (size_t)lab->arr.dims[0];
  for (size_t i = 0; i + 1 < d->ncols; i++)
    if ((size_t)d->cols[i].arr.dims[0] != d->rows)
      return cli_err(e, "%s has %lld rows but the labels %s have %zu", d->cols[i].file,
                     (long long)d->cols[i].arr.dims[0], labels, d->rows);
  return 0;
}

/* The column's name as a NUL-terminated string (names point at "NAME=FILE"). */
static char* column_name(const Column* c) {
  const char* eq = strchr(c->name, '=');
  return strndup(c->name, (size_t)(eq - c->name));
}

/* A tensor of rows idx[0..n) of column c. */
static int gather_rows(const Column* c, const size_t* idx, size_t n, OnyxValue** out, CliError* e) {
  size_t bytes = 0;
  if (!ox_mul_size(n, c->row_bytes, &bytes)) return cli_err(e, "%s: batch size overflows", c->file);
  unsigned char* buf = malloc(bytes ? bytes : 1);
  if (!buf) return cli_err(e, "out of memory");
  for (size_t i = 0; i < n; i++)
    memcpy(buf + i * c->row_bytes, (const unsigned char*)c->arr.data + idx[i] * c->row_bytes,
           c->row_bytes);
  int64_t dims[NPY_MAX_RANK];
  memcpy(dims, c->arr.dims, sizeof dims);
  dims[0] = (int64_t)n;
  OnyxStatus* st =
      onyx_value_create_tensor(elem_type(c->arr.type), dims, c->arr.rank, buf, bytes, out);
  free(buf);
  return st ? cli_err_status(e, st, "%s: making a batch", c->file) : 0;
}

/* --- Batch order ---------------------------------------------------------------------- */
/* splitmix64 (Steele, Lea, Flood 2014): the documented generator of the shuffles. */
static uint64_t splitmix64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The row order of epoch `epoch` (0-based): the identity with shuffle 0, else
 * a Fisher-Yates shuffle of the identity drawing j in [0, i] as the high 64
 * bits of draw * (i + 1), from splitmix64 started at seed ^ (epoch *
 * 0xD1B54A32D192ED03). Each epoch's order depends on the seed and the
 * epoch alone, so a resumed run sees the batches an uninterrupted one would. */
static void epoch_order(size_t* perm, size_t rows, int shuffle, uint64_t seed, uint64_t epoch) {
  for (size_t i = 0; i < rows; i++)
    perm[i] = i;
  if (!shuffle) return;
  uint64_t s = seed ^ (epoch * 0xD1B54A32D192ED03ull);
  for (size_t i = rows; i-- > 1;) {
    size_t j = (size_t)(((unsigned __int128)splitmix64(&s) * (i + 1)) >> 64);
    size_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* --- Evaluation -------------------------------------------------------------------------- */
/* Adds the loss terms and correct predictions of one batch: pred [n, C, d...]
 * (cross_entropy) or the labels' shape (the others); labels as loaded. The
 * sums are divided by the number of terms at the end: the mean over every
 * held-out element, as the training loss is a mean. */
typedef struct EvalSums {
  double loss;
  size_t terms, correct, predictions;
} EvalSums;

static double pred_at(const OnyxTensor* t, size_t i) {
  return onyx_tensor_elem_type(t) == ONYX_ELEM_FLOAT64 ? ((const double*)onyx_tensor_data(t))[i]
                                                       : ((const float*)onyx_tensor_data(t))[i];
}

static double label_at(const NpyArray* a, size_t i) {
  switch (a->type) {
  case NPY_FLOAT32:
    return ((const float*)a->data)[i];
  case NPY_FLOAT64:
    return ((const double*)a->data)[i];
  case NPY_INT64:
    return (double)((const int64_t*)a->data)[i];
  case NPY_INT32:
    return ((const int32_t*)a->data)[i];
  case NPY_UINT8:
  case NPY_BOOL:
    return ((const uint8_t*)a->data)[i];
  }
  return 0;
}

static int eval_batch(const char* loss, const OnyxTensor* pred, const Column* lab,
                      const size_t* idx, size_t n, EvalSums* s, CliError* e) {
  OnyxElemType pt = onyx_tensor_elem_type(pred);
  if (pt != ONYX_ELEM_FLOAT32 && pt != ONYX_ELEM_FLOAT64)
    return cli_err(e, "eval: the prediction is %s, not float32/float64", onyx_elem_type_name(pt));
  const int64_t* pd = onyx_tensor_dims(pred);
  size_t prank = onyx_tensor_rank(pred), per_row = lab->row_bytes / lab->arr.elem_size;
  if (prank < 1 || (size_t)pd[0] != n)
    return cli_err(e, "eval: the prediction's first dim is not the batch");
  if (!strcmp(loss, "cross_entropy")) {
    if (prank < 2) return cli_err(e, "eval: cross_entropy needs a prediction [N, C, ...]");
    size_t classes = (size_t)pd[1], inner = 1;
    for (size_t i = 2; i < prank; i++)
      inner *= (size_t)pd[i];
    if (inner != per_row)
      return cli_err(e, "eval: %s has %zu labels per row, the prediction %zu", lab->file, per_row,
                     inner);
    for (size_t r = 0; r < n; r++)
      for (size_t d = 0; d < inner; d++) {
        int64_t y = ((const int64_t*)lab->arr.data)[idx[r] * per_row + d];
        if (y < 0 || (size_t)y >= classes)
          return cli_err(e, "eval: %s: label %lld outside [0, %zu)", lab->file, (long long)y,
                         classes);
        size_t base = r * classes * inner + d;
        double mx = -INFINITY;
        size_t arg = 0;
        for (size_t c = 0; c < classes; c++) {
          double v = pred_at(pred, base + c * inner);
          if (v > mx) mx = v, arg = c;
        }
        double se = 0;
        for (size_t c = 0; c < classes; c++)
          se += exp(pred_at(pred, base + c * inner) - mx);
        s->loss += log(se) + mx - pred_at(pred, base + (size_t)y * inner);
        s->terms++;
        s->correct += arg == (size_t)y;
        s->predictions++;
      }
    return 0;
  }
  if (onyx_tensor_elem_count(pred) != n * per_row)
    return cli_err(e, "eval: the prediction has %zu elements, the labels of the batch %zu",
                   onyx_tensor_elem_count(pred), n * per_row);
  for (size_t r = 0; r < n; r++)
    for (size_t k = 0; k < per_row; k++) {
      double x = pred_at(pred, r * per_row + k), y = label_at(&lab->arr, idx[r] * per_row + k);
      if (!strcmp(loss, "mse"))
        s->loss += (x - y) * (x - y);
      else if (!strcmp(loss, "l1"))
        s->loss += fabs(x - y);
      else /* bce_with_logits */
        s->loss += fmax(x, 0) - x * y + log1p(exp(-fabs(x)));
      s->terms++;
    }
  return 0;
}

/* The held-out loss (and accuracy for cross_entropy) of the current
 * parameters: the inference model is exported to the artifacts folder and
 * run in batches of --batch-size (the last one may be shorter); loss and
 * accuracy are computed here from its predictions. */
static int evaluate(OnyxTrainingSession* ts, const char* art, const char* config, int threads,
                    const Dataset* d, size_t batch, const char* loss, double* out_loss,
                    double* out_acc, CliError* e) {
  char* path = cli_path_join(art, "eval_export.onnx");
  if (!path) return cli_err(e, "out of memory");
  OnyxStatus* st = onyx_training_session_export_for_inference(ts, path);
  OnyxSession* s = NULL;
  int rc = st ? cli_err_status(e, st, "eval: exporting the model") : 0;
  if (!rc) rc = cli_session_open(path, config, threads, &s, NULL, e);
  free(path);
  size_t nin = d->ncols - 1;
  char** names = calloc(nin ? nin : 1, sizeof *names);
  OnyxValue** ins = calloc(nin ? nin : 1, sizeof *ins);
  size_t* idx = calloc(batch, sizeof *idx);
  if (!rc && (!names || !ins || !idx)) rc = cli_err(e, "out of memory");
  for (size_t i = 0; !rc && i < nin; i++)
    if (!(names[i] = column_name(&d->cols[i]))) rc = cli_err(e, "out of memory");
  EvalSums sums = {0};
  const char* out_name = s ? onyx_session_output_name(s, 0) : NULL;
  if (!rc && !out_name) rc = cli_err(e, "eval: the exported model has no output");
  for (size_t start = 0; !rc && start < d->rows; start += batch) {
    size_t n = d->rows - start < batch ? d->rows - start : batch;
    for (size_t i = 0; i < n; i++)
      idx[i] = start + i;
    for (size_t i = 0; !rc && i < nin; i++)
      rc = gather_rows(&d->cols[i], idx, n, &ins[i], e);
    OnyxValue* pred = NULL;
    if (!rc && (st = onyx_session_run(s, NULL, (const char* const*)names,
                                      (const OnyxValue* const*)ins, nin, &out_name, 1, &pred)))
      rc = cli_err_status(e, st, "eval: running the exported model");
    if (!rc && !onyx_value_tensor(pred)) rc = cli_err(e, "eval: the prediction is not a tensor");
    if (!rc) rc = eval_batch(loss, onyx_value_tensor(pred), &d->cols[nin], idx, n, &sums, e);
    onyx_value_release(pred);
    onyx_values_release(ins, nin);
  }
  if (!rc) {
    *out_loss = sums.terms ? sums.loss / (double)sums.terms : 0;
    *out_acc = sums.predictions ? (double)sums.correct / (double)sums.predictions : NAN;
  }
  for (size_t i = 0; names && i < nin; i++)
    free(names[i]);
  free(names);
  free(ins);
  free(idx);
  onyx_session_release(s);
  return rc;
}

/* --- Progress --------------------------------------------------------------------------- */
typedef struct Progress {
  int tty;
  double start_ms, last_ms;
  long total;
} Progress;

/* A bar with loss, samples/s and ETA redrawn at most 10 times a second on a
 * terminal; otherwise a plain line every ~5% of the steps (and the last). */
static void progress(Progress* p, long done, double loss, size_t batch) {
  double now = cli_now_ms(), el = (now - p->start_ms) / 1000.0;
  double sps = el > 0 ? (double)done * (double)batch / el : 0;
  double eta = done > 0 ? el / (double)done * (double)(p->total - done) : 0;
  if (p->tty) {
    if (now - p->last_ms < 100 && done < p->total) return;
    p->last_ms = now;
    int width = 30, fill = (int)((double)width * (double)done / (double)p->total);
    char bar[31];
    for (int i = 0; i < width; i++)
      bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %ld/%ld loss %.4f  %.0f samples/s  ETA %d:%02d ", bar, done, p->total,
            loss, sps, (int)eta / 60, (int)eta % 60);
    if (done == p->total) fputc('\n', stderr);
  } else {
    long every = p->total / 20 > 0 ? p->total / 20 : 1;
    if (done % every && done != p->total) return;
    fprintf(stderr, "step %ld/%ld loss %.6g %.0f samples/s ETA %.0fs\n", done, p->total, loss, sps,
            eta);
  }
  fflush(stderr);
}

/* --- The command ------------------------------------------------------------------------ */
static int rm_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

typedef struct Trainer {
  const TrainArgs* a;
  OnyxProcessGroup* pg; /* --data-parallel */
  int rank, world;
  Dataset train, eval;
  char art[64]; /* the artifacts folder ("" until made) */
  OnyxCheckpoint* ck;
  OnyxTrainingSession* ts;
  FILE* log;
} Trainer;

static int parse_kinds(const TrainArgs* a, OnyxTrainingArtifactsOptions* o, CliError* e) {
  onyx_training_artifacts_options_init(o);
  static const char* const kLoss[] = {"cross_entropy", "mse", "bce_with_logits", "l1"};
  static const OnyxLossKind kLossKind[] = {ONYX_LOSS_CROSS_ENTROPY, ONYX_LOSS_MSE,
                                           ONYX_LOSS_BCE_WITH_LOGITS, ONYX_LOSS_L1};
  size_t i = 0;
  while (i < 4 && strcmp(a->loss, kLoss[i]))
    i++;
  if (i == 4) return cli_err(e, "--loss '%s'", a->loss);
  o->loss = kLossKind[i];
  if (!strcmp(a->optimizer, "sgd")) {
    o->optimizer = ONYX_OPTIMIZER_SGD;
    o->weight_decay = 0;
  } else if (!strcmp(a->optimizer, "adamw")) {
    o->optimizer = ONYX_OPTIMIZER_ADAMW;
    o->weight_decay = 0.01f;
  } else {
    o->optimizer = ONYX_OPTIMIZER_LAMB;
    o->weight_decay = 0;
    o->epsilon = 1e-6f;
  }
  o->momentum = isnan(a->momentum) ? 0.0f : (float)a->momentum;
  o->dampening = 0;
  o->nesterov = 0;
  if (!isnan(a->weight_decay)) o->weight_decay = (float)a->weight_decay;
  o->learning_rate = (float)a->lr;
  if (a->mixed_precision) {
    static const char* const kMp[] = {"none", "float16", "bfloat16"};
    int32_t k = 0;
    while (k < 3 && strcmp(a->mixed_precision, kMp[k]))
      k++;
    if (k == 3) return cli_err(e, "--mixed-precision '%s'", a->mixed_precision);
    o->mixed_precision = k;
  }
  return 0;
}

static void log_step(FILE* f, long step, double loss, double lr, double ms) {
  if (!f) return;
  fprintf(f, "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"ms\": %.3f}\n", step, loss, lr, ms);
}

static int run_eval(Trainer* t, long epoch, long step, double* loss, double* acc, CliError* e) {
  const TrainArgs* a = t->a;
  if (evaluate(t->ts, t->art, a->config, a->threads, &t->eval, (size_t)a->batch, a->loss, loss, acc,
               e))
    return -1;
  if (t->log) {
    fprintf(t->log, "{\"eval\": %ld, \"step\": %ld, \"loss\": %.9g", epoch, step, *loss);
    if (!isnan(*acc)) fprintf(t->log, ", \"accuracy\": %.6f", *acc);
    fprintf(t->log, "}\n");
    fflush(t->log);
  }
  /* On a terminal, clear the progress bar's line first; the bar redraws below. */
  fprintf(stderr, "%seval after epoch %ld (step %ld): loss %.6g", isatty(2) ? "\r\033[K" : "",
          epoch, step, *loss);
  if (!isnan(*acc)) fprintf(stderr, ", accuracy %.4f", *acc);
  fputc('\n', stderr);
  return 0;
}

static int train(Trainer* t, CliError* e) {
  const TrainArgs* a = t->a;
  /* Data-parallel: global batch k is `global` rows of the epoch's order, of
   * which this rank takes `batch` from offset rank * batch. */
  size_t batch = (size_t)a->batch, rows = t->train.rows, global = batch * (size_t)t->world;
  size_t slice = batch * (size_t)t->rank;
  long per_epoch = (long)(rows / global), total = a->steps;
  if (a->epochs && !ox_mul_i64(a->epochs, per_epoch, &(int64_t){0}))
    return cli_err(e, "--epochs %d: too many steps", a->epochs);
  if (a->epochs) total = (long)a->epochs * per_epoch;

  size_t nin = t->train.ncols;
  /* Every --data names a model input (the labels are the session's last input). */
  size_t n_sess = onyx_training_session_input_count(t->ts);
  for (size_t j = 0; j + 1 < nin; j++) {
    const char* have = t->train.cols[j].name;
    size_t len = (size_t)(strchr(have, '=') - have), i = 0;
    while (i + 1 < n_sess && (strlen(onyx_training_session_input_name(t->ts, i)) != len ||
                              strncmp(onyx_training_session_input_name(t->ts, i), have, len)))
      i++;
    if (i + 1 >= n_sess)
      return cli_err(e, "--data %.*s: the model has no input of that name", (int)len, have);
  }
  if (n_sess != nin)
    return cli_err(e, "the training model takes %zu inputs (the model's, then labels); %zu given",
                   n_sess, nin);
  /* Order the columns as the session's inputs: --data by name, the labels last. */
  Column* ordered = calloc(nin, sizeof *ordered);
  if (!ordered) return cli_err(e, "out of memory");
  int rc = 0;
  for (size_t i = 0; !rc && i + 1 < nin; i++) {
    const char* want = onyx_training_session_input_name(t->ts, i);
    size_t j = 0;
    while (j + 1 < nin && (strncmp(t->train.cols[j].name, want, strlen(want)) ||
                           t->train.cols[j].name[strlen(want)] != '='))
      j++;
    if (j + 1 == nin)
      rc = cli_err(e, "no --data for the model input '%s'", want);
    else
      ordered[i] = t->train.cols[j];
  }
  ordered[nin - 1] = t->train.cols[nin - 1];
  size_t* perm = calloc(rows, sizeof *perm);
  OnyxValue** ins = calloc(nin, sizeof *ins);
  if (!rc && (!perm || !ins)) rc = cli_err(e, "out of memory");

  int shuffle = !a->no_shuffle;
  uint64_t seed = a->seed >= 0 ? (uint64_t)a->seed : kDefaultSeed;
  int64_t step0 = onyx_checkpoint_step(t->ck);
  Progress p = {.tty = isatty(2), .start_ms = cli_now_ms(), .total = total};
  double last_loss = NAN, eval_loss = NAN, eval_acc = NAN;
  long last_eval_step = -1;
  OnyxStatus* st = NULL;
  for (long k = 0; !rc && k < total; k++) {
    int64_t g = step0 + k; /* steps taken before this one */
    long epoch = (long)(g / per_epoch), b = (long)(g % per_epoch);
    if (b == 0 || k == 0) epoch_order(perm, rows, shuffle, seed, (uint64_t)epoch);
    for (size_t i = 0; !rc && i < nin; i++)
      rc = gather_rows(&ordered[i], perm + (size_t)b * global + slice, batch, &ins[i], e);
    if (rc) break;
    double lr = onyx_training_session_get_learning_rate(t->ts);
    double t0 = cli_now_ms();
    OnyxValue* loss = NULL;
    st = onyx_training_session_train_step(t->ts, (const OnyxValue* const*)ins, nin, &loss);
    if (!st) st = onyx_training_session_optimizer_step(t->ts);
    if (!st) st = onyx_training_session_lazy_reset_grad(t->ts);
    double ms = cli_now_ms() - t0;
    onyx_values_release(ins, nin);
    if (st) {
      onyx_value_release(loss);
      rc = cli_err_status(e, st, "step %lld", (long long)g + 1);
      break;
    }
    const OnyxTensor* lt = onyx_value_tensor(loss);
    last_loss = lt && onyx_tensor_elem_count(lt) == 1 ? pred_at(lt, 0) : NAN;
    onyx_value_release(loss);
    log_step(t->log, (long)g + 1, last_loss, lr, ms);
    if (t->rank == 0) progress(&p, k + 1, last_loss, global);
    if (t->rank == 0 && t->eval.ncols && (b == per_epoch - 1 || k + 1 == total)) {
      rc = run_eval(t, epoch + 1, (long)g + 1, &eval_loss, &eval_acc, e);
      last_eval_step = (long)g + 1;
    }
  }
  (void)last_eval_step;
  double el = (cli_now_ms() - p.start_ms) / 1000.0;
  if (!rc && t->rank == 0) {
    printf("{\"steps\": %ld, \"step\": %lld, \"loss\": %.9g, \"samples_per_s\": %.1f", total,
           (long long)onyx_checkpoint_step(t->ck), last_loss,
           el > 0 ? (double)total * (double)global / el : 0.0);
    if (t->world > 1) printf(", \"ranks\": %d", t->world);
    /* Steps skipped for a non-finite loss or gradient (the loss scaler's
     * overflows among them), and the scale the scaler ended at. */
    printf(", \"skipped_steps\": %lld", (long long)onyx_training_session_skipped_steps(t->ts));
    if (onyx_training_session_get_loss_scale(t->ts) > 0)
      printf(", \"loss_scale\": %.9g", (double)onyx_training_session_get_loss_scale(t->ts));
    if (!isnan(eval_loss)) printf(", \"eval_loss\": %.9g", eval_loss);
    if (!isnan(eval_acc)) printf(", \"eval_accuracy\": %.6f", eval_acc);
    printf("}\n");
  }
  free(perm);
  free(ins);
  free(ordered);
  return rc;
}

/* The artifacts, generated into a new temporary folder t->art. */
static int make_artifacts(Trainer* t, const OnyxTrainingArtifactsOptions* ao, CliError* e) {
  const char* tmp = getenv("TMPDIR");
  snprintf(t->art, sizeof t->art, "%s/onyx-train-XXXXXX",
           tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(t->art)) {
    t->art[0] = '\0';
    return cli_err(e, "cannot create a temporary folder for the artifacts");
  }
  char* path = cli_model_path(t->a->model);
  if (!path) return cli_err(e, "out of memory");
  OnyxStatus* st = onyx_training_artifacts_generate(path, ao, t->art);
  free(path);
  return st ? cli_err_status(e, st, "generating the training artifacts") : 0;
}

/* The names of the symbolic first dims of s's inputs (the batch), added to
 * d with value `batch` unless d names them already. An input whose first
 * dim is unknown and unnamed cannot be fixed by name: a note on stderr says
 * so (the plan sizes what depends on it at run time). */
static int batch_dims(const OnyxSession* s, int64_t batch, CliDims* d, CliError* e) {
  for (size_t i = 0; i < onyx_session_input_count(s); i++) {
    const char* p = onyx_session_input_dim_param(s, i, 0);
    int32_t rank = -1;
    const int64_t* dims = NULL;
    onyx_status_release(onyx_session_input_info(s, i, NULL, &rank, &dims));
    if (!p && rank > 0 && dims[0] < 0) {
      fputs("onyx train: note: the first dimension of input '", stderr);
      cli_fputs_escaped(stderr, onyx_session_input_name(s, i), 0);
      fputs("' has no name, so --explain cannot fix it to --batch-size\n", stderr);
    }
    size_t k = 0;
    while (p && k < d->count && strcmp(d->names[k], p))
      k++;
    if (p && k == d->count && cli_dims_add(d, p, batch)) return cli_err(e, "out of memory");
  }
  return 0;
}

/* --explain: each session of the artifacts in t->art as `onyx partition
 * --explain` reports it, with the batch dim (the symbolic first dim of the
 * training model's inputs) fixed to --batch-size and the --dim values. */
static int explain_training(Trainer* t, CliError* e) {
  const TrainArgs* a = t->a;
  static const char* const kModels[3][2] = {{"training", "training_model.onnx"},
                                            {"eval", "eval_model.onnx"},
                                            {"optimizer", "optimizer_model.onnx"}};
  CliDims dims = {0};
  int rc = 0;
  char* train_path = cli_path_join(t->art, kModels[0][1]);
  OnyxSession* probe = NULL;
  if (!train_path) rc = cli_err(e, "out of memory");
  if (!rc) rc = cli_session_open(train_path, a->config, a->threads, &probe, NULL, e);
  if (!rc) rc = batch_dims(probe, a->batch, &dims, e);
  onyx_session_release(probe);
  free(train_path);
  for (size_t i = 0; !rc && i < a->dims.count; i++)
    if (cli_dims_add(&dims, a->dims.names[i], a->dims.values[i])) rc = cli_err(e, "out of memory");
  const CliSessionExtra extra = {.dims = &dims};
  int blank = 1; /* the output so far ends with a blank line (or is empty) */
  for (int m = 0; !rc && m < 3; m++) {
    char* path = cli_path_join(t->art, kModels[m][1]);
    OnyxSession* s = NULL;
    rc = path ? cli_session_open_ex(path, a->config, a->threads, &extra, &s, NULL, e)
              : cli_err(e, "out of memory");
    if (!rc && m == 0) rc = cli_dims_check(&a->dims, s, "the training model", e);
    char* text = NULL;
    OnyxStatus* st = rc ? NULL : onyx_session_explain(s, &text);
    if (st) rc = cli_err_status(e, st, "explaining the %s session", kModels[m][0]);
    if (!rc) {
      printf("%s== %s session (%s of the artifacts)", blank ? "" : "\n", kModels[m][0],
             kModels[m][1]);
      for (size_t i = 0; i < dims.count; i++) {
        printf("%s", i ? ", " : "; fixed dims: ");
        cli_fputs_escaped(stdout, dims.names[i], 0);
        printf("=%lld", (long long)dims.values[i]);
      }
      printf(" ==\n");
      fputs(text ? text : "", stdout); /* names escaped by onyx_session_explain */
      /* One blank line between the sessions' reports. */
      size_t len = text ? strlen(text) : 0;
      blank = len >= 2 && text[len - 1] == '\n' && text[len - 2] == '\n';
    }
    onyx_free(text);
    onyx_session_release(s);
    free(path);
  }
  cli_dims_free(&dims);
  return rc;
}

static int run_training(Trainer* t, CliError* e) {
  const TrainArgs* a = t->a;
  OnyxTrainingArtifactsOptions ao;
  if (parse_kinds(a, &ao, e)) return -1;
  if (a->explain) return make_artifacts(t, &ao, e) || explain_training(t, e) ? -1 : 0;
  if (dataset_load(&t->train, &a->data, a->labels, "--data", a->loss, e)) return -1;
  if (a->eval_data.count &&
      dataset_load(&t->eval, &a->eval_data, a->eval_labels, "--eval-data", a->loss, e))
    return -1;
  t->world = 1;
  if (a->data_parallel) {
    OnyxProcessGroupOptions pgo;
    onyx_process_group_options_init(&pgo);
    if (!isnan(a->collective_timeout))
      pgo.timeout_ms = (uint32_t)ceil(a->collective_timeout * 1000.0);
    OnyxStatus* pst = onyx_process_group_create(&pgo, &t->pg);
    if (pst) return cli_err_status(e, pst, "--data-parallel: making the process group");
    t->rank = onyx_process_group_rank(t->pg);
    t->world = onyx_process_group_size(t->pg);
  }
  if (t->world == 1 && t->train.rows < (size_t)a->batch)
    return cli_err(e, "--batch-size %d exceeds the %zu rows of the data", a->batch, t->train.rows);
  if (t->train.rows / (size_t)t->world < (size_t)a->batch)
    return cli_err(e, "--batch-size %d on each of %d ranks exceeds the %zu rows of the data",
                   a->batch, t->world, t->train.rows);
  if (make_artifacts(t, &ao, e)) return -1;
  OnyxStatus* st = NULL;
  char* ckdir = a->resume ? strdup(a->resume) : cli_path_join(t->art, "checkpoint");
  if (!ckdir) return cli_err(e, "out of memory");
  st = onyx_checkpoint_load(ckdir, &t->ck);
  int rc = st ? cli_err_status(e, st, "%s %s", a->resume ? "--resume" : "checkpoint", ckdir) : 0;
  free(ckdir);
  if (rc) return -1;

  OnyxSessionOptions* so = NULL;
  st = onyx_session_options_create(&so);
  if (!st && a->config) st = onyx_session_options_load_config(so, a->config);
  if (!st && a->threads > 0) st = onyx_session_options_set_threads(so, a->threads);
  if (!st) st = onyx_training_session_create(so, t->ck, t->art, &t->ts);
  onyx_session_options_release(so);
  if (st) return cli_err_status(e, st, "creating the training session");
  if (a->data_parallel) {
    OnyxDataParallelOptions dpo;
    onyx_data_parallel_options_init(&dpo);
    dpo.process_group = t->pg;
    dpo.zero_stage = a->zero_stage;
    if (!isnan(a->bucket_mb)) dpo.bucket_bytes = (size_t)(a->bucket_mb * 1048576.0);
    if (a->host_allreduce) dpo.allreduce_in_graph = 0;
    if (a->blocking_allreduce) dpo.allreduce_in_graph = 2;
    if ((st = onyx_training_session_set_data_parallel(t->ts, &dpo)))
      return cli_err_status(e, st, "--data-parallel");
  }
  if ((st = onyx_training_session_set_learning_rate(t->ts, (float)a->lr)))
    return cli_err_status(e, st, "--lr");
  if (a->seed >= 0 && (st = onyx_training_session_set_seed(t->ts, (uint64_t)a->seed)))
    return cli_err_status(e, st, "--seed");
  if (a->log && t->rank == 0 && !(t->log = fopen(a->log, "w")))
    return cli_err(e, "--log %s: cannot create the file", a->log);
  if (train(t, e)) return -1;
  /* ZeRO-1: every rank sends its shard of the optimizer state; rank 0 saves. */
  if (a->save_checkpoint && (st = onyx_training_session_gather_optimizer_state(t->ts)))
    return cli_err_status(e, st, "--save-checkpoint %s", a->save_checkpoint);
  if (t->rank > 0) return 0;
  if (a->save_checkpoint && (st = onyx_checkpoint_save(t->ck, a->save_checkpoint, 1)))
    return cli_err_status(e, st, "--save-checkpoint %s", a->save_checkpoint);
  if (a->export_path && (st = onyx_training_session_export_for_inference(t->ts, a->export_path)))
    return cli_err_status(e, st, "--export-inference %s", a->export_path);
  return 0;
}

int cli_cmd_train(int argc, char** argv) {
  TrainArgs a = {.seed = -1,
                 .lr = NAN,
                 .momentum = NAN,
                 .weight_decay = NAN,
                 .bucket_mb = NAN,
                 .collective_timeout = NAN};
  const CliOpt opts[] = {
      {"--loss", CLI_OPT_STRING, &a.loss, 0},
      {"--data", CLI_OPT_LIST, &a.data, 0},
      {"--labels", CLI_OPT_STRING, &a.labels, 0},
      {"--batch-size", CLI_OPT_INT, &a.batch, 1},
      {"--steps", CLI_OPT_INT, &a.steps, 1},
      {"--epochs", CLI_OPT_INT, &a.epochs, 1},
      {"--optimizer", CLI_OPT_STRING, &a.optimizer, 0},
      {"--lr", CLI_OPT_DOUBLE, &a.lr, 0},
      {"--momentum", CLI_OPT_DOUBLE, &a.momentum, 0},
      {"--mixed-precision", CLI_OPT_STRING, &a.mixed_precision, 0},
      {"--weight-decay", CLI_OPT_DOUBLE, &a.weight_decay, 0},
      {"--no-shuffle", CLI_OPT_FLAG, &a.no_shuffle, 0},
      {"--seed", CLI_OPT_INT, &a.seed, 0},
      {"--threads", CLI_OPT_INT, &a.threads, 1},
      {"--config", CLI_OPT_STRING, &a.config, 0},
      {"--log", CLI_OPT_STRING, &a.log, 0},
      {"--save-checkpoint", CLI_OPT_STRING, &a.save_checkpoint, 0},
      {"--resume", CLI_OPT_STRING, &a.resume, 0},
      {"--export-inference", CLI_OPT_STRING, &a.export_path, 0},
      {"--eval-data", CLI_OPT_LIST, &a.eval_data, 0},
      {"--eval-labels", CLI_OPT_STRING, &a.eval_labels, 0},
      {"--data-parallel", CLI_OPT_FLAG, &a.data_parallel, 0},
      {"--zero-stage", CLI_OPT_INT, &a.zero_stage, 0},
      {"--bucket-mb", CLI_OPT_DOUBLE, &a.bucket_mb, 0},
      {"--host-allreduce", CLI_OPT_FLAG, &a.host_allreduce, 0},
      {"--blocking-allreduce", CLI_OPT_FLAG, &a.blocking_allreduce, 0},
      {"--collective-timeout", CLI_OPT_DOUBLE, &a.collective_timeout, 0},
      {"--explain", CLI_OPT_FLAG, &a.explain, 0},
      {"--dim", CLI_OPT_LIST, &a.dim_list, 0},
  };
  const CliCommand cmd = {
      .name = "train",
      .synopsis =
          "onyx train MODEL.onnx --loss cross_entropy|mse|bce_with_logits|l1 "
          "--data INPUT_NAME=FILE.npy [--data ...] --labels FILE.npy --batch-size N "
          "(--steps S | --epochs E) --optimizer sgd|adamw|lamb --lr X [--momentum M] "
          "[--mixed-precision none|float16|bfloat16] "
          "[--weight-decay W] [--no-shuffle | --seed S] [--threads N] "
          "[--config providers.json] [--log FILE.jsonl] [--save-checkpoint DIR] "
          "[--resume DIR] [--export-inference OUT.onnx] [--eval-data ... --eval-labels ...] "
          "[--data-parallel [--zero-stage 0|1] [--bucket-mb M] [--host-allreduce | "
          "--blocking-allreduce] [--collective-timeout SECONDS]] [--explain [--dim NAME=VALUE "
          "...]]",
      .help = kTrainHelp,
      .opts = opts,
      .opt_count = sizeof opts / sizeof opts[0],
      .min_positional = 1,
      .max_positional = 1,
      .positional_name = "MODEL"};
  size_t npos = 0;
  CliParse p = cli_parse(&cmd, argc, argv, &a.model, &npos);
  int rc = CLI_EXIT_OK;
  char dim_msg[512] = "";
  if (p == CLI_PARSED && a.explain && isnan(a.lr)) a.lr = 1e-3; /* not used */
  if (p != CLI_PARSED) {
    rc = p == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  } else if (cli_dims_parse(&a.dim_list, &a.dims, dim_msg, sizeof dim_msg)) {
    rc = cli_usage_error(&cmd, "%s", dim_msg);
  } else if (a.dims.count && !a.explain) {
    rc = cli_usage_error(&cmd, "--dim applies with --explain only");
  } else if (a.explain && a.data_parallel) {
    rc = cli_usage_error(&cmd, "--explain and --data-parallel exclude each other");
  } else if (!a.loss || (strcmp(a.loss, "cross_entropy") && strcmp(a.loss, "mse") &&
                         strcmp(a.loss, "bce_with_logits") && strcmp(a.loss, "l1"))) {
    rc = a.loss ? cli_usage_error(&cmd,
                                  "--loss: expected cross_entropy, mse, bce_with_logits or "
                                  "l1, got '%s'",
                                  a.loss)
                : cli_usage_error(&cmd, "--loss is required");
  } else if (!a.data.count && !a.explain) {
    rc = cli_usage_error(&cmd, "--data NAME=FILE.npy is required");
  } else if (!a.labels && !a.explain) {
    rc = cli_usage_error(&cmd, "--labels FILE.npy is required");
  } else if (!a.batch) {
    rc = cli_usage_error(&cmd, "--batch-size is required");
  } else if (!a.explain && !a.steps == !a.epochs) {
    rc = cli_usage_error(&cmd, "give one of --steps and --epochs");
  } else if (!a.optimizer || (strcmp(a.optimizer, "sgd") && strcmp(a.optimizer, "adamw") &&
                              strcmp(a.optimizer, "lamb"))) {
    rc = a.optimizer ? cli_usage_error(&cmd, "--optimizer: expected sgd, adamw or lamb, got '%s'",
                                       a.optimizer)
                     : cli_usage_error(&cmd, "--optimizer is required");
  } else if (isnan(a.lr) || !(a.lr > 0) || isinf(a.lr)) {
    rc = cli_usage_error(&cmd, "%s", isnan(a.lr) ? "--lr is required" : "--lr must be positive");
  } else if (a.mixed_precision && strcmp(a.mixed_precision, "none") &&
             strcmp(a.mixed_precision, "float16") && strcmp(a.mixed_precision, "bfloat16")) {
    rc = cli_usage_error(&cmd, "--mixed-precision: expected none, float16 or bfloat16, got '%s'",
                         a.mixed_precision);
  } else if (!isnan(a.momentum) && strcmp(a.optimizer, "sgd")) {
    rc = cli_usage_error(&cmd, "--momentum applies to --optimizer sgd only");
  } else if (a.no_shuffle && a.seed >= 0) {
    rc = cli_usage_error(&cmd, "--no-shuffle and --seed exclude each other");
  } else if (!a.eval_data.count != !a.eval_labels) {
    rc = cli_usage_error(&cmd, "--eval-data and --eval-labels go together");
  } else if (a.zero_stage != 0 && a.zero_stage != 1) {
    rc = cli_usage_error(&cmd, "--zero-stage: expected 0 or 1, got %d", a.zero_stage);
  } else if ((a.zero_stage || !isnan(a.bucket_mb) || a.host_allreduce || a.blocking_allreduce ||
              !isnan(a.collective_timeout)) &&
             !a.data_parallel) {
    rc = cli_usage_error(&cmd, "--zero-stage, --bucket-mb, --host-allreduce, "
                               "--blocking-allreduce and --collective-timeout need "
                               "--data-parallel");
  } else if (a.host_allreduce && a.blocking_allreduce) {
    rc = cli_usage_error(&cmd, "--host-allreduce and --blocking-allreduce exclude each other");
  } else if (!isnan(a.collective_timeout) &&
             !(a.collective_timeout >= 0.001 && a.collective_timeout <= 4294967.0)) {
    rc = cli_usage_error(&cmd,
                         "--collective-timeout: expected seconds from 0.001 to 4294967, got %g",
                         a.collective_timeout);
  } else if (!isnan(a.bucket_mb) && !(a.bucket_mb * 1048576.0 >= 8 && a.bucket_mb <= 1e6)) {
    rc = cli_usage_error(&cmd,
                         "--bucket-mb: expected at least 8 bytes' worth and at most 1e6, "
                         "got %g",
                         a.bucket_mb);
  }
  if (p == CLI_PARSED && rc == CLI_EXIT_OK) {
    CliError e = CLI_ERROR_INIT;
    Trainer t = {.a = &a};
    if (run_training(&t, &e)) rc = cli_report("train", &e);
    if (t.log) fclose(t.log);
    onyx_training_session_release(t.ts);
    onyx_checkpoint_release(t.ck);
    onyx_process_group_release(t.pg);
    if (t.art[0]) nftw(t.art, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    dataset_free(&t.train);
    dataset_free(&t.eval);
  }
  cli_list_free(&a.data);
  cli_list_free(&a.eval_data);
  cli_list_free(&a.dim_list);
  cli_dims_free(&a.dims);
  return rc;
}

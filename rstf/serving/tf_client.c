/* rstf's TensorFlow client: runs and times a frozen graph through TensorFlow's C API.
 *
 * Why a C client: a Python `Session.run` (or a callable) spends 0.4-0.7 ms of interpreter
 * and wrapper work on every call on the machines we measure, against about 0.06 ms for
 * `TF_SessionRun` itself. That belongs to no engine, yet it would sit on both sides of
 * every ratio and hide what a graph costs where models are served: TensorFlow Serving and
 * other C++ servers call Session::Run directly. rstf.runner builds this file once (cached
 * by content), writes the feeds as raw files and reads the fetched outputs back.
 *
 * Usage: tf_client SPEC. SPEC is a text file, one directive per line; a name or a path is
 * always the rest of its line, so it may hold any character but a newline:
 *   dir PATH                      where the feed files are and the output files go
 *   reps N                        timed calls after the one warm-up call (with `also`
 *                                 graphs: timed rounds)
 *   warmup MS                     with reps > 0: after the warm-up call, untimed calls
 *                                 (every graph in turn) for at least MS milliseconds
 *                                 (default 0): the first calls after it still run slower
 *   block N                       each graph's calls in a round, in a row (default 1);
 *                                 every one is timed
 *   lib PATH                      an op library to load (TF_LoadLibrary), any number
 *   graph PATH                    the frozen GraphDef
 *   also PATH                     another frozen GraphDef with the same feeds and fetches,
 *                                 timed interleaved with the first (after `graph`, before
 *                                 any feed or fetch; any number)
 *   feed DTYPE NDIMS D0 .. TENSOR a feed, in order: its bytes are DIR/in<i>.bin
 *   fetch TENSOR                  a fetch, in order: the warm-up's value goes to DIR/out<i>.bin
 * DTYPE is TensorFlow's TF_DataType number, TENSOR is "node:index".
 *
 * Prints one JSON line: {"times_ms": [...], "outputs": [{"dtype": N, "shape": [...]}, ...]},
 * with "also_times_ms": [[...], ...] per `also` graph, or {"error": "..."} with exit status 1.
 *
 * With `also` graphs, every timed round calls each graph `block` times in a row, the graphs
 * in order and then in reverse order on alternate rounds (A B, B A, ...): the machines we
 * measure on are shared, their load comes in bursts, and interleaving lands a burst on every
 * graph instead of one. A graph's first call of its block finds the caches holding the
 * other graphs' weights; the caller may leave it out. Times are listed call by call (round
 * r's block is calls r*block .. r*block+block-1). Only the first graph's warm-up outputs
 * are saved; the others' are fetched and dropped.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorflow/c/c_api.h"

#define MAX_DIMS 16
#define MAX_GRAPHS 8

static void put_escaped(const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p; ++p) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p < 0x20) printf("\\u%04x", *p);
    else putchar(*p);
  }
}

/* Prints "what: msg" as the error JSON line and exits. */
static void fail(const char *what, const char *msg) {
  printf("{\"error\": \"");
  put_escaped(what);
  if (*msg) printf(": ");
  put_escaped(msg);
  printf("\"}\n");
  exit(1);
}

static void check(TF_Status *status, const char *what) {
  if (TF_GetCode(status) != TF_OK) fail(what, TF_Message(status));
}

static char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) fail("cannot open", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(n > 0 ? (size_t)n : 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) fail("cannot read", path);
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* "node:index" of `graph`, or a one-line error naming the tensor. */
static TF_Output lookup(TF_Graph *graph, char *tensor) {
  char *colon = strrchr(tensor, ':');
  if (!colon) fail("not a tensor name (node:index)", tensor);
  *colon = '\0';
  TF_Output port = {TF_GraphOperationByName(graph, tensor), atoi(colon + 1)};
  *colon = ':';
  if (!port.oper) fail("no such node in the graph", tensor);
  if (port.index < 0 || port.index >= TF_OperationNumOutputs(port.oper))
    fail("no such output of its node", tensor);
  return port;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
  if (argc != 2) fail("usage", "tf_client SPEC");
  size_t spec_size;
  char *spec = read_file(argv[1], &spec_size);
  spec = realloc(spec, spec_size + 1);
  spec[spec_size] = '\0';

  TF_Status *status = TF_NewStatus();
  TF_Graph *graphs[MAX_GRAPHS];
  int n_graphs = 0;
  const char *dir = ".";
  long reps = 0, block = 1;
  double warmup_ms = 0;
  /* At most one feed or fetch per spec line. */
  TF_Output *in_ports[MAX_GRAPHS], *out_ports[MAX_GRAPHS];
  for (int g = 0; g < MAX_GRAPHS; ++g) {
    in_ports[g] = malloc((spec_size + 1) * sizeof(TF_Output));
    out_ports[g] = malloc((spec_size + 1) * sizeof(TF_Output));
  }
  TF_Tensor **in_values = malloc((spec_size + 1) * sizeof(TF_Tensor *));
  int n_feeds = 0, n_fetches = 0;
  char path[8192];

  for (char *line = strtok(spec, "\n"); line; line = strtok(NULL, "\n")) {
    char *arg = strchr(line, ' ');
    if (!arg) fail("bad spec line", line);
    *arg++ = '\0';
    if (!strcmp(line, "dir")) {
      dir = arg;
    } else if (!strcmp(line, "reps")) {
      reps = atol(arg);
    } else if (!strcmp(line, "warmup")) {
      warmup_ms = atof(arg);
    } else if (!strcmp(line, "block")) {
      block = atol(arg);
      if (block < 1) fail("bad block", arg);
    } else if (!strcmp(line, "lib")) {
      TF_Library *lib = TF_LoadLibrary(arg, status);
      check(status, "loading the op library");
      (void)lib; /* kept loaded for the process's life */
    } else if (!strcmp(line, "graph") || !strcmp(line, "also")) {
      if (!strcmp(line, "graph") != (n_graphs == 0)) fail("`also` before `graph`, or two `graph`s", arg);
      if (n_feeds || n_fetches) fail("a graph after a feed or fetch", arg);
      if (n_graphs == MAX_GRAPHS) fail("too many graphs", arg);
      TF_Graph *graph = graphs[n_graphs++] = TF_NewGraph();
      size_t n;
      char *bytes = read_file(arg, &n);
      TF_Buffer *buf = TF_NewBufferFromString(bytes, n);
      TF_ImportGraphDefOptions *opts = TF_NewImportGraphDefOptions();
      TF_GraphImportGraphDef(graph, buf, opts, status);
      check(status, "importing the graph");
      TF_DeleteImportGraphDefOptions(opts);
      TF_DeleteBuffer(buf);
      free(bytes);
    } else if (!strcmp(line, "feed")) {
      char *rest;
      int dtype = (int)strtol(arg, &rest, 10), ndims = (int)strtol(rest, &rest, 10);
      if (ndims < 0 || ndims > MAX_DIMS) fail("bad feed rank", arg);
      int64_t dims[MAX_DIMS];
      for (int k = 0; k < ndims; ++k) dims[k] = strtoll(rest, &rest, 10);
      char *tensor = rest + 1;
      snprintf(path, sizeof path, "%s/in%d.bin", dir, n_feeds);
      size_t n;
      char *bytes = read_file(path, &n);
      TF_Tensor *value = TF_AllocateTensor((TF_DataType)dtype, dims, ndims, n);
      if (!value || TF_TensorByteSize(value) != n) fail("bad feed size", tensor);
      memcpy(TF_TensorData(value), bytes, n);
      free(bytes);
      if (!n_graphs) fail("a feed before the graph", tensor);
      for (int g = 0; g < n_graphs; ++g) in_ports[g][n_feeds] = lookup(graphs[g], tensor);
      in_values[n_feeds++] = value;
    } else if (!strcmp(line, "fetch")) {
      if (!n_graphs) fail("a fetch before the graph", arg);
      for (int g = 0; g < n_graphs; ++g) out_ports[g][n_fetches] = lookup(graphs[g], arg);
      n_fetches++;
    } else {
      fail("unknown spec directive", line);
    }
  }

  if (!n_graphs) fail("no graph in the spec", "");
  TF_SessionOptions *opts = TF_NewSessionOptions();
  TF_Session *sessions[MAX_GRAPHS];
  double *times[MAX_GRAPHS];
  for (int g = 0; g < n_graphs; ++g) {
    sessions[g] = TF_NewSession(graphs[g], opts, status);
    check(status, "creating the session");
    times[g] = malloc((reps * block + 1) * sizeof(double));
  }

  TF_Tensor **out_values = calloc(n_fetches + 1, sizeof(TF_Tensor *));

  /* Call 0 is the warm-up (graph optimisation, allocations); its outputs are saved. */
  int *out_dtype = calloc(n_fetches + 1, sizeof(int)), *out_rank = calloc(n_fetches + 1, sizeof(int));
  int64_t *out_dims = calloc((size_t)(n_fetches + 1) * MAX_DIMS, sizeof(int64_t));
  for (long r = -1; r < reps; ++r)
  for (int j = 0; j < n_graphs; ++j)
  for (long c = 0; c < (r < 0 ? 1 : block); ++c) {
    int g = r % 2 ? n_graphs - 1 - j : j;  /* A B .., then .. B A */
    if (r == 0 && j == 0 && c == 0 && warmup_ms > 0) {
      /* untimed: every graph in turn until warmup_ms have passed since call 0 */
      for (double end = now_ms() + warmup_ms; now_ms() < end;)
        for (int w = 0; w < n_graphs; ++w) {
          TF_SessionRun(sessions[w], NULL, in_ports[w], in_values, n_feeds, out_ports[w],
                        out_values, n_fetches, NULL, 0, NULL, status);
          check(status, "running the graph");
          for (int i = 0; i < n_fetches; ++i) {
            TF_DeleteTensor(out_values[i]);
            out_values[i] = NULL;
          }
        }
    }
    double t0 = now_ms();
    TF_SessionRun(sessions[g], NULL, in_ports[g], in_values, n_feeds, out_ports[g], out_values,
                  n_fetches, NULL, 0, NULL, status);
    double t1 = now_ms();
    check(status, "running the graph");
    if (r >= 0) times[g][r * block + c] = t1 - t0;
    for (int i = 0; i < n_fetches; ++i) {
      TF_Tensor *t = out_values[i];
      if (r < 0 && g == 0) {
        if (TF_TensorType(t) == TF_STRING || TF_NumDims(t) > MAX_DIMS)
          fail("cannot save this output (a string, or rank over 16)", "");
        snprintf(path, sizeof path, "%s/out%d.bin", dir, i);
        FILE *f = fopen(path, "wb");
        size_t n = TF_TensorByteSize(t);
        if (!f || fwrite(TF_TensorData(t), 1, n, f) != n || fclose(f)) fail("cannot write", path);
        out_dtype[i] = TF_TensorType(t);
        out_rank[i] = TF_NumDims(t);
        for (int k = 0; k < out_rank[i]; ++k) out_dims[i * MAX_DIMS + k] = TF_Dim(t, k);
      }
      TF_DeleteTensor(t);
      out_values[i] = NULL;
    }
  }
  printf("{\"outputs\": [");
  for (int i = 0; i < n_fetches; ++i) {
    printf("%s{\"dtype\": %d, \"shape\": [", i ? ", " : "", out_dtype[i]);
    for (int k = 0; k < out_rank[i]; ++k)
      printf("%s%lld", k ? ", " : "", (long long)out_dims[i * MAX_DIMS + k]);
    printf("]}");
  }
  printf("], \"times_ms\": [");
  for (long r = 0; r < reps * block; ++r) printf("%s%.6f", r ? ", " : "", times[0][r]);
  printf("]");
  if (n_graphs > 1) {
    printf(", \"also_times_ms\": [");
    for (int g = 1; g < n_graphs; ++g) {
      printf("%s[", g > 1 ? ", " : "");
      for (long r = 0; r < reps * block; ++r) printf("%s%.6f", r ? ", " : "", times[g][r]);
      printf("]");
    }
    printf("]");
  }
  printf("}\n");

  for (int g = 0; g < n_graphs; ++g) {
    TF_CloseSession(sessions[g], status);
    TF_DeleteSession(sessions[g], status);
  }
  return 0;
}

/* read_file.c — size-limited whole-file reads. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ox_model.h"

#define OX_DEFAULT_READ_LIMIT OX_DEFAULT_MAX_MODEL_BYTES

static OnyxStatus* ox_over_limit(const char* path, size_t max_bytes) {
  return ox_status(ONYX_LIMIT_EXCEEDED, "'%s' is larger than the limit of %zu bytes", path,
                   max_bytes);
}

/* Reads until EOF; works for pipes too, where the size is unknown up front. */
static OnyxStatus* ox_read_all(int fd, const char* path, size_t hint, size_t max_bytes,
                               uint8_t** data, size_t* len) {
  size_t cap = hint + 1, n = 0;
  uint8_t* buf = malloc(cap);
  if (!buf) return ox_oom();
  for (;;) {
    if (n == cap) {
      size_t ncap = cap < max_bytes / 2 ? cap * 2 : max_bytes + 1;
      uint8_t* nb = ncap > cap ? realloc(buf, ncap) : NULL;
      if (!nb) {
        free(buf);
        return ncap > cap ? ox_oom() : ox_over_limit(path, max_bytes);
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      free(buf);
      return ox_status(ONYX_FAIL, "cannot read '%s': %s", path, strerror(err));
    }
    if (r == 0) break;
    n += (size_t)r;
    if (n > max_bytes) {
      free(buf);
      return ox_over_limit(path, max_bytes);
    }
  }
  *data = buf;
  *len = n;
  return NULL;
}

OnyxStatus* ox_read_file(const char* path, size_t max_bytes, void** data, size_t* len) {
  *data = NULL;
  *len = 0;
  if (!path || !*path) return ox_status(ONYX_INVALID_ARGUMENT, "no file name given");
  if (!max_bytes) max_bytes = OX_DEFAULT_READ_LIMIT;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return ox_status(err == ENOENT ? ONYX_NOT_FOUND : ONYX_INVALID_ARGUMENT, "cannot open '%s': %s",
                     path, strerror(err));
  }
  struct stat sb;
  OnyxStatus* st = NULL;
  if (fstat(fd, &sb) != 0)
    st = ox_status(ONYX_FAIL, "cannot stat '%s': %s", path, strerror(errno));
  else if (S_ISDIR(sb.st_mode))
    st = ox_status(ONYX_INVALID_ARGUMENT, "'%s' is a directory, not a file", path);
  else if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max_bytes)
    st = ox_status(ONYX_LIMIT_EXCEEDED, "'%s' is %lld bytes, over the limit of %zu bytes", path,
                   (long long)sb.st_size, max_bytes);
  else
    st = ox_read_all(fd, path, S_ISREG(sb.st_mode) ? (size_t)sb.st_size : 65536, max_bytes,
                     (uint8_t**)data, len);
  close(fd);
  return st;
}

/* Mapping is opt-in (ONYX_MMAP_FILES=1): a mapped file that another process
 * truncates while it is parsed kills this one with SIGBUS, where a read only
 * sees fewer bytes. */
OnyxStatus* ox_map_file(const char* path, size_t max_bytes, void** data, size_t* len,
                        bool* mapped) {
  *data = NULL;
  *len = 0;
  *mapped = false;
  if (!path || !*path) return ox_status(ONYX_INVALID_ARGUMENT, "no file name given");
  if (!max_bytes) max_bytes = OX_DEFAULT_READ_LIMIT;
  const char* want = getenv("ONYX_MMAP_FILES");
  if (!want || strcmp(want, "1")) return ox_read_file(path, max_bytes, data, len);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ox_read_file(path, max_bytes, data, len); /* its error message */
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
      (uint64_t)sb.st_size <= max_bytes) {
    void* p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p != MAP_FAILED) {
      close(fd);
      *data = p;
      *len = (size_t)sb.st_size;
      *mapped = true;
      return NULL;
    }
  }
  close(fd);
  return ox_read_file(path, max_bytes, data, len);
}

void ox_unmap_file(void* data, size_t len, bool mapped) {
  if (mapped)
    munmap(data, len);
  else
    free(data);
}

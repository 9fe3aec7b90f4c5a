/* proto_check.c — checks on an unpacked message tree that protobuf-c does not
 * make: every `string` field (names, op types, domains, doc strings, dim
 * params, metadata) must be valid UTF-8, as the protobuf language requires of
 * `string`. `bytes` fields (attribute strings, raw data, string tensors) may
 * hold anything. The walk follows the descriptors, so fields added to
 * onnx.proto later are covered without a change here. */
#include <stdio.h>
#include <string.h>
#include "model_internal.h"

/* Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing
 * above U+10FFFF. Returns the offset of the first bad byte, or SIZE_MAX. */
size_t ox_utf8_invalid_at(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return SIZE_MAX;
}

/* The path of the field being checked, for the message: "graph.node[3].name". */
typedef struct OxProtoPath {
  char text[512];
  size_t len;
} OxProtoPath;

static size_t ox_path_push(OxProtoPath* p, const char* name, size_t index, bool indexed) {
  size_t mark = p->len;
  int n = indexed ? snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s[%zu]",
                             p->len ? "." : "", name, index)
                  : snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s", p->len ? "." : "",
                             name);
  if (n > 0) p->len = p->len + (size_t)n < sizeof p->text ? p->len + (size_t)n : sizeof p->text - 1;
  return mark;
}

static void ox_path_pop(OxProtoPath* p, size_t mark) {
  p->len = mark;
  p->text[mark] = '\0';
}

static OnyxStatus* ox_check_message(const ProtobufCMessage* m, OxProtoPath* path);

static OnyxStatus* ox_check_string(const char* s, const ProtobufCFieldDescriptor* f, size_t index,
                                   bool indexed, OxProtoPath* path) {
  if (!s) return NULL;
  size_t n = strlen(s);
  size_t at = ox_utf8_invalid_at((const uint8_t*)s, n);
  if (at == SIZE_MAX) return NULL;
  size_t mark = ox_path_push(path, f->name, index, indexed);
  OnyxStatus* st =
      ox_status(ONYX_INVALID_MODEL, "field '%s' is not valid UTF-8 (byte 0x%02x at offset %zu)",
                path->text, (unsigned)(uint8_t)s[at], at);
  ox_path_pop(path, mark);
  return st;
}

static OnyxStatus* ox_check_submessage(const ProtobufCMessage* sub,
                                       const ProtobufCFieldDescriptor* f, size_t index,
                                       bool indexed, OxProtoPath* path) {
  if (!sub) return NULL;
  size_t mark = ox_path_push(path, f->name, index, indexed);
  OnyxStatus* st = ox_check_message(sub, path);
  ox_path_pop(path, mark);
  return st;
}

/* A oneof member is only valid while its case is the one set. */
static bool ox_field_present(const ProtobufCMessage* m, const ProtobufCFieldDescriptor* f) {
  if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) return true;
  const uint32_t* which = (const uint32_t*)((const char*)m + f->quantifier_offset);
  return *which == f->id;
}

static OnyxStatus* ox_check_field(const ProtobufCMessage* m, const ProtobufCFieldDescriptor* f,
                                  OxProtoPath* path) {
  const char* member = (const char*)m + f->offset;
  if (f->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t count = *(const size_t*)((const char*)m + f->quantifier_offset);
    if (f->type == PROTOBUF_C_TYPE_STRING) {
      char* const* a = *(char* const* const*)member;
      for (size_t i = 0; i < count; i++)
        OX_TRY(ox_check_string(a[i], f, i, true, path));
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
      ProtobufCMessage* const* a = *(ProtobufCMessage* const* const*)member;
      for (size_t i = 0; i < count; i++)
        OX_TRY(ox_check_submessage(a[i], f, i, true, path));
    }
    return NULL;
  }
  if (!ox_field_present(m, f)) return NULL;
  if (f->type == PROTOBUF_C_TYPE_STRING)
    return ox_check_string(*(const char* const*)member, f, 0, false, path);
  if (f->type == PROTOBUF_C_TYPE_MESSAGE)
    return ox_check_submessage(*(const ProtobufCMessage* const*)member, f, 0, false, path);
  return NULL;
}

/* Recursion is bounded: the loader refuses deep nesting before unpacking. */
static OnyxStatus* ox_check_message(const ProtobufCMessage* m, OxProtoPath* path) {
  const ProtobufCMessageDescriptor* d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++)
    OX_TRY(ox_check_field(m, &d->fields[i], path));
  return NULL;
}

OnyxStatus* ox_proto_check_text(const ProtobufCMessage* m) {
  OxProtoPath path = {{0}, 0};
  return ox_check_message(m, &path);
}

/* An application of the outer project: it links libonyx from the Onyx
 * subproject, prints the library's version and checks it is the one given
 * on the command line (the subproject's PROJECT_VERSION). */
#include <stdio.h>
#include <string.h>

#include "onyx/onyx.h"

int main(int argc, char** argv) {
  const char* v = onyx_version_string();
  printf("onyx %s\n", v ? v : "(null)");
  return v && argc == 2 && strcmp(v, argv[1]) == 0 ? 0 : 1;
}

/* Uses the installed C ABI without a daemon. */
#include <stdio.h>
#include <string.h>

#include "client/kvtier_c.h"

int main(void) {
  kvtier_client* client = NULL;
  if (kvtier_connect("tcp://nohost", NULL, 100, &client) != KVTIER_EINVAL) return 1;
  if (strstr(kvtier_last_error(), "tcp://nohost") == NULL) return 2;
  kvtier_key ns;
  memset(&ns, 7, sizeof ns);
  const uint32_t tokens[4] = {1, 2, 3, 4};
  kvtier_key keys[2];
  size_t n = 0;
  if (kvtier_hash_tokens(&ns, tokens, 4, 2, keys, 2, &n) != KVTIER_OK || n != 2) return 3;
  printf("%s\n", kvtier_last_error());
  return 0;
}

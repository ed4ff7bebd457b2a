/* Fuzz the metrics agent's parsers of files other programs write: a
 * process's cgroup (its job), a job-mapping file, a /proc/PID/stat line, a
 * loader publication's bytes and a /proc/PID/status "Uid:" line. The first
 * byte picks the parser. (fuzz_publication.c drives whole publication
 * files through the agent.) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/agent/agent_impl.h"
#include "../../src/loader/publish.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned which = data[0] % 5;
  data++;
  size--;
  if (size > 8192) size = 8192;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  char job[AG_JOB_LEN], why[256];
  static char jobs[AG_MAP_MAX_JOBS][AG_JOB_LEN];
  unsigned n;
  uint64_t ticks, start;
  switch (which) {
  case 0:
    if (stk__ag_parse_cgroup(text, job) == 0 && strlen(job) >= AG_JOB_LEN) abort();
    break;
  case 1:
    if (stk__ag_parse_map("fuzz", text, jobs, AG_MAP_MAX_JOBS, &n, why, sizeof why) == 0)
      for (unsigned i = 0; i < n; i++)
        if (!jobs[i][0] || strlen(jobs[i]) >= AG_JOB_LEN) abort();
    break;
  case 2:
    stk__ag_parse_stat(text, &ticks, &start);
    break;
  case 3: {
    struct stk_pub out;
    if (stk__pub_parse(data, size, &out) == STK__PUB_OK &&
        (strlen(out.job) >= sizeof out.job || strlen(out.dataset) >= sizeof out.dataset))
      abort();
    break;
  }
  default: {
    uint32_t uids[4];
    stk__ag_parse_uids(text, uids);
  }
  }
  free(text);
  return 0;
}

/* The table of placement policies, NULL-terminated in the paper's order,
 * and the lookups the public API and the runs use. Each policy lives in its
 * own policy_*.c file behind struct stk_sim_policy_ops. */
#include <strings.h>

#include "sim_impl.h"

const struct stk_sim_policy_ops *const stk__sim_policies[] = {
    &stk__sim_policy_random,
    &stk__sim_policy_dotprod,
    &stk__sim_policy_gpuclustering,
    &stk__sim_policy_gpupacking,
    &stk__sim_policy_bestfit,
    &stk__sim_policy_fgd,
    NULL,
};

const struct stk_sim_policy_ops *stk__sim_policy_get(const char *name) {
  int i = stk_sim_policy_find(name);
  return i < 0 ? NULL : stk__sim_policies[i];
}

size_t stk_sim_policy_count(void) { return STK__ARRAY_LEN(stk__sim_policies) - 1; }

const char *stk_sim_policy_name(size_t i) {
  return i < stk_sim_policy_count() ? stk__sim_policies[i]->name : NULL;
}

const char *stk_sim_policy_summary(size_t i) {
  return i < stk_sim_policy_count() ? stk__sim_policies[i]->summary : NULL;
}

int stk_sim_policy_find(const char *name) {
  if (!name) return STK_EINVAL;
  for (size_t i = 0; stk__sim_policies[i]; i++)
    if (!strcasecmp(stk__sim_policies[i]->name, name)) return (int)i;
  return STK_EINVAL;
}

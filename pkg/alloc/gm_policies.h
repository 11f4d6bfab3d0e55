/* gm_policies.h — the policy table: one row per allocation policy, in the
 * order reports list them. A row names the policy's id (GM_POLICY_<ID>) and
 * the gm_policy_t its file gm_policy_<name>.c defines; the public enum, the
 * engine's table and Go's list of policies (through gm_policy_info) all come
 * from these rows. Adding a policy is one new gm_policy_<name>.c and one row
 * here (see docs/architecture.md, "How to add a policy"). */
#ifndef GM_POLICIES_H
#define GM_POLICIES_H

#define GM_POLICIES(X)             \
  X(PYTORCH, gm_policy_pytorch)    \
  X(GPUMEM, gm_policy_gpumem)      \
  X(RMM, gm_policy_rmm)            \
  X(BFC, gm_policy_bfc)            \
  X(CUPY, gm_policy_cupy)          \
  X(ASYNC, gm_policy_async)        \
  X(NOCACHE, gm_policy_nocache)    \
  /* a new row goes above this line */

#endif

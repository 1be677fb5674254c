// Package migflexctl is `kubectl migflex`: what an operator asks of
// migflex on a live cluster, answered from the objects migflex's parts
// publish and with their own code, read-only but for apply.
//
//   - status: each node's serving mode, config state and reason, its GPUs
//     and instances and the pods holding them (the Node contract of
//     internal/domain/nodeinfo), and the free instances per profile.
//   - explain: a pod's GPU request as written and after the webhook
//     (internal/webhook/fallback's annotations), the planner's Events for it, and
//     what the planner would do now (internal/planner's PreviewRound).
//   - plan: the planner's next round as a dry run.
//   - validate: the agent's check of a mig.config against a node's GPUs
//     (internal/domain/migconfig/configcheck, as `device-plugin validate` runs it).
//   - apply: a mig.config file written to the node's annotation by patch,
//     whatever its size up to the agent's limit.
//
// Exit codes are documented on the constants and in the help text.
package migflexctl

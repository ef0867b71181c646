// Package launcher is gorun's local agent: it joins a rendezvous round,
// starts the node's workers with torchrun's environment, streams their
// output, watches them, and on a failure stops them all and restarts them
// in a new round, until they succeed or the restart budget is spent.
//
// Processes. Each worker leads its own session and process group (as
// torchrun's start_new_session; internal/sys/proc's Options.Setsid says
// why a session), so that stopping it (SIGTERM, a grace period, then
// SIGKILL) reaches its children too, such as DataLoader workers.
// internal/sys/proc forks and reaps it with SIGKILL as its parent-death
// signal, so a worker never outlives a killed gorun. An exit is seen the
// moment the kernel reports it; nothing polls.
//
// Decisions that need no process (the restart policy, the worker
// environment, the failure summary) are pure functions or small types with
// an injected clock, tested without starting anything.
package launcher

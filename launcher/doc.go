// Package launcher is gorun's local agent: it joins a rendezvous round,
// starts the node's workers with torchrun's environment, streams their
// output, watches them, and on a failure stops them all and restarts them
// in a new round, until they succeed or the restart budget is spent.
//
// Processes. Each worker leads its own session and process group (as
// torchrun's start_new_session; process.go says why a session), so that
// stopping it (SIGTERM, a grace period, then SIGKILL) reaches its
// children too, such as DataLoader workers. Each worker is started and
// waited for by one goroutine locked to its OS thread: the worker gets
// SIGKILL as its parent death signal, which Linux delivers when the
// thread that forked it ends, so the thread must live as long as the
// worker. An exit is seen the moment the kernel reports it; nothing polls.
//
// Decisions that need no process (the restart policy, the worker
// environment, the failure summary) are pure functions or small types with
// an injected clock, tested without starting anything.
package launcher

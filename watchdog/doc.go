// Package watchdog finds hung and failed collectives: a Watchdog looks at
// every in-flight operation of a process's groups at least every 100 ms,
// records each in the flight recorder (Recorder: a bounded ring with
// PyTorch's entry fields, dumped as JSON per rank), and reports the first
// that runs past its timeout or fails. A Handler then reports it, dumps
// the recorder, tells the other ranks through the store (SignalKey), and
// aborts and ends the process as the error-handling mode says
// (TORCH_NCCL_ASYNC_ERROR_HANDLING's numbering). MonitorHeartbeat ends a
// process whose watchdog itself stopped making progress.
package watchdog

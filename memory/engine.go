package memory

import "sync"

// Engine keeps the tensors of asynchronous collectives safe from reuse
// according to a Mode, and returns their memory as early as the mode
// allows. A process group calls it at four points (the contract):
//
//   - Launch, after enqueuing the operation on the communication stream
//     and recording the Work's end event there, with every tensor the
//     operation reads or writes (flattened buffers too);
//   - Wait, when the user waits: it makes the waiting stream wait for the
//     end event, then releases what the mode holds. The waiting stream
//     should be the tensors' allocation stream: memory is reused on that
//     stream only;
//   - Completed, from the watchdog, once it saw the end event complete
//     (Device.Query): a Work nobody waits for hands its shelf over;
//   - Drain, at the start of every process-group call, on the caller's
//     goroutine: it releases what Completed handed over.
//
// All methods are safe for concurrent use.
type Engine struct {
	alloc *Allocator
	mode  Mode

	mu      sync.Mutex
	handoff [][]*Tensor
}

// NewEngine returns an engine for allocations of a in mode (see
// ModeFromEnv for the environment's).
func NewEngine(a *Allocator, mode Mode) *Engine { return &Engine{alloc: a, mode: mode} }

// Mode is the engine's mode.
func (e *Engine) Mode() Mode { return e.mode }

// Work is the engine's view of one asynchronous operation.
type Work struct {
	// Stream is the communication stream; End the event recorded after
	// the operation on it.
	Stream Stream
	End    Event
	// P2P marks send/receive, which falls back to recordStream in mode 2.
	P2P bool

	mu       sync.Mutex
	shelf    []*Tensor     // strong references (mode 2)
	recorded []recordedUse // uses to erase at Wait (modes 1, 3; P2P in 2)
	waited   bool
}

// recordedUse is a weak reference to a storage whose use on the Work's
// stream was recorded, with its block for mode 3.
type recordedUse struct {
	st *Storage
}

// Launch protects the tensors of w, just enqueued.
func (e *Engine) Launch(w *Work, tensors ...*Tensor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case e.mode == ModeNone:
	case e.mode == ModeAvoidRecordStream && !w.P2P:
		for _, t := range tensors {
			w.shelf = append(w.shelf, t.Retain())
		}
	default:
		for _, t := range tensors {
			t.st.RecordStream(w.Stream)
			if e.mode != ModeRecordStream {
				w.recorded = append(w.recorded, recordedUse{st: t.st})
			}
		}
	}
}

// Wait orders stream waiting after w and releases what the mode held for
// it. Waiting twice is harmless.
func (e *Engine) Wait(w *Work, waiting Stream) {
	e.alloc.dev.StreamWait(waiting, w.End)
	w.mu.Lock()
	if w.waited {
		w.mu.Unlock()
		return
	}
	w.waited = true
	shelf, recorded := w.shelf, w.recorded
	w.shelf, w.recorded = nil, nil
	w.mu.Unlock()
	for _, r := range recorded {
		st := r.st
		switch {
		case st.Alive():
			e.alloc.eraseStream(st.b, st.gen, w.Stream, waiting)
		case e.mode == ModeEraseWithBlock:
			e.alloc.eraseStream(st.b, st.gen, w.Stream, waiting)
		}
	}
	for _, t := range shelf {
		t.Release()
	}
}

// Completed is the watchdog's report that w's end event completed: its
// shelf, if nobody waited yet, goes to the hand-off list.
func (e *Engine) Completed(w *Work) {
	w.mu.Lock()
	shelf := w.shelf
	w.shelf = nil
	w.mu.Unlock()
	if len(shelf) == 0 {
		return
	}
	e.mu.Lock()
	e.handoff = append(e.handoff, shelf)
	e.mu.Unlock()
}

// Drain releases the shelves handed over by Completed.
func (e *Engine) Drain() {
	e.mu.Lock()
	shelves := e.handoff
	e.handoff = nil
	e.mu.Unlock()
	for _, shelf := range shelves {
		for _, t := range shelf {
			t.Release()
		}
	}
}

// Held is the number of tensor references the engine holds (shelves of
// Works not yet waited or drained are counted by their Works).
func (e *Engine) Held() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.handoff {
		n += len(s)
	}
	return n
}

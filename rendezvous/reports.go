package rendezvous

import "time"

// HangDeclared is a round declared hung by the nodes' live hang watch:
// every node's ranks showed no sign of life for the hang timeout, or one
// node saw the cause among its own ranks (one left, or is outside any
// collective while the others wait).
type HangDeclared struct {
	// ID names the declaration: the nodes' evidence requests carry it.
	ID string `json:"id"`
	// By is the group rank of the node that declared it.
	By int `json:"by"`
	// Why says what it saw, in words.
	Why string `json:"why"`
	// At is when it was declared, by the declaring node's clock.
	At time.Time `json:"at"`
}

// NodeReport is one node's value under a key of the round that every
// node writes (its group rank the key).
type NodeReport struct {
	GroupRank int
	Value     []byte
}

// LeftRank is a rank that exited 0 while the others ran.
type LeftRank struct {
	Rank      int       `json:"rank"`
	LocalRank int       `json:"local_rank"`
	PID       int       `json:"pid"`
	Host      string    `json:"host"`
	At        time.Time `json:"at"`
	// Left says what it did, in words ("exited 0 after 21 optimizer
	// steps at ...").
	Left string `json:"left"`
}

// Package layers holds the test that keeps gorun's packages depending one
// way (docs/architecture.md): it has no code of its own.
package layers

package testfs

import "testing"

// TestBehaviourPlain proves the suite: every case passes on a plain
// local directory.
func TestBehaviourPlain(t *testing.T) {
	RunCases(t, BehaviourCases, PlainDir)
}

// TestBehaviourMount runs the same cases at the top of a fresh mount each.
func TestBehaviourMount(t *testing.T) {
	RunCases(t, BehaviourCases, MountDir)
}

// TestBehaviourSafefs checks safefs's own semantics (mount only).
func TestBehaviourSafefs(t *testing.T) {
	RunCases(t, SafefsCases, MountDir)
}

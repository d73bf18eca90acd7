package dedup

import (
	"fmt"
	"testing"
)

func TestWindowDropsRepeatsWithinItsSize(t *testing.T) {
	w := New(3)
	for _, k := range []string{"a", "b", "c"} {
		if w.Seen(k) {
			t.Fatalf("%q reported seen on first sight", k)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		if !w.Seen(k) {
			t.Fatalf("%q not reported seen within the window", k)
		}
	}
	// A fourth key evicts the oldest, "a".
	if w.Seen("d") {
		t.Fatal("d reported seen on first sight")
	}
	if w.Seen("a") {
		t.Fatal("a still remembered after the window moved past it")
	}
	if w.Len() != 3 {
		t.Fatalf("window holds %d keys, want its size 3", w.Len())
	}
}

func TestWindowMemoryIsBounded(t *testing.T) {
	w := New(100)
	for i := range 10_000 {
		w.Seen(fmt.Sprint(i))
	}
	if w.Len() != 100 {
		t.Fatalf("window holds %d keys after 10,000 distinct ones, want 100", w.Len())
	}
	if !w.Seen("9999") || w.Seen("9899") {
		t.Fatal("the window does not hold exactly the newest 100 keys")
	}
}

func TestWindowEmptyKeyIsNotRecorded(t *testing.T) {
	w := New(2)
	if !w.Seen("") || w.Len() != 0 {
		t.Fatal("an empty key was recorded")
	}
}

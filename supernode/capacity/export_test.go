package capacity

// setAcquiredForTest sets the acquisition half of the state word and the
// wrap count so that tests can cross the 2^32 wrap without 4 billion
// acquisitions. Only for use while no other goroutine uses s.
func (s *Semaphore) setAcquiredForTest(wraps uint64, low uint32) {
	s.wraps.Store(wraps)
	s.state.Store(uint64(low)<<32 | s.state.Load()&slotMask)
}

// beginBadReleaseForTest performs the first half of a Release that finds no
// slot held (the borrow), leaving the state as another goroutine would see
// it before the undo. endBadReleaseForTest undoes it.
func (s *Semaphore) beginBadReleaseForTest() { s.state.Add(^uint64(0)) }
func (s *Semaphore) endBadReleaseForTest()   { s.state.Add(1) }

package record

// Pending returns the completions waiting for a group (for tests).
func (c *Completer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

package processor

// CountLostLeases counts n lost leases of cmdType, as if they had been lost
// (for tests of what a grown lease does).
func (p *Processor) CountLostLeases(cmdType string, n int) {
	for range n {
		p.leaseLost(&keeper{cmdType: cmdType})
	}
}

// ParseMessage parses and checks a queue message as the processor does.
var ParseMessage = parseMessage

// Parked returns how many messages of cmdType wait parked for one of its
// MaxConcurrency slots.
func (p *Processor) Parked(cmdType string) int {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	return p.parked[cmdType]
}

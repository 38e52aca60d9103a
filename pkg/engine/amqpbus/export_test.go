package amqpbus

import "time"

// SetAckHold sets how long c's consumers hold an ack back; set it before
// Consume.
func (c *Conn) SetAckHold(d time.Duration) { c.ackHold = d }

package amqpbus

import "time"

// SetAckHold sets how long c's consumers hold an ack back; set it before
// Consume.
func (c *Conn) SetAckHold(d time.Duration) { c.ackHold = d }

// SettleFrames returns the ack, nack and reject frames c's consumers sent.
func (c *Conn) SettleFrames() int64 { return c.settleFrames.Load() }

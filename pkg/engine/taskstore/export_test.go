package taskstore

// RepairKey is the repair set that holds task id's entry.
func (s *Store) RepairKey(id string) string { return s.repairKey(id) }

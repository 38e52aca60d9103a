package taskstore

// RepairKey is the repair set that holds task id's entry.
func (s *Store) RepairKey(id string) string { return s.repairKey(id) }

// ProcessingKey is the processing index set that holds task id's entry.
func (s *Store) ProcessingKey(id string) string { return s.processingKey(id) }

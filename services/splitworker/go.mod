module github.com/orderflow/orderflow/services/splitworker

go 1.26.0

require github.com/orderflow/orderflow/pkg v0.0.0

replace github.com/orderflow/orderflow/pkg => ../../pkg

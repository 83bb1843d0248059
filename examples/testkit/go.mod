module example.com/testkit

go 1.26

require github.com/cmdq-dev/cmdq v0.0.0

replace github.com/cmdq-dev/cmdq => ../..

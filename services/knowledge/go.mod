module github.com/converge-dev/converge/services/knowledge

go 1.26.0

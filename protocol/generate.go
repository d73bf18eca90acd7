package protocol

// The generated code is committed. Regenerating needs protoc (Debian package
// protobuf-compiler, 3.21.12) on PATH; protoc-gen-go is a tool of this module
// (go.mod's tool directive), so its version is pinned by go.mod.
//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --go_out=. --go_opt=paths=source_relative pb/overlayd.proto"

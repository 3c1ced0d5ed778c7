"""Offline stand-in for rules_proto: re-exports Bazel 4's native proto rules.

lmforge itself compiles protos with protoc through a genrule (see bazel/lmf.bzl); this file only satisfies
the loads inside @bazel_tools.
"""

def proto_library(**kwargs):
    native.proto_library(**kwargs)

def proto_lang_toolchain(**kwargs):
    native.proto_lang_toolchain(**kwargs)

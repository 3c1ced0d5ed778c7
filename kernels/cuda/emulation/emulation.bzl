"""lmf_emulated_test: CUDA code run on the CPU through this folder's emulation, its sources read from Bazel.

A test of this rule compiles, with g++ at test time (emulated_test.sh, the steps in common.sh), every C++
source its targets depend on in this workspace: the .cu files of lmf_cuda_library targets rewritten for the
fiber emulator (cuemu.h), the host .cc files, the generated protobuf code, against the fake CUDA headers of
fake/ (and cublaslt/fake/). The lists come from the dependency graph (an aspect over `deps` and `srcs`), so a
new op package or a new model source is picked up where a test depends on it, with no list to edit. The
fakes appear only on the g++ command lines of emulated_test.sh, never in a cc target's compilation.

The graph is read in its own configuration (//bazel:cuda_emulation set): there cuda_compatible() is always
compatible and if_cuda() takes the CUDA branch, with or without a CUDA toolkit and under --config=nocuda too,
since nothing of it is built but generated sources.
"""

EmulatedSourcesInfo = provider(
    doc = "The C++ files a target and its dependencies compile, in this workspace (the aspect below).",
    fields = {
        "own": "list of this target's own .cc/.cu files (a test's are its program's)",
        "sources": "depset of the .cc/.cu files of this target and everything it depends on",
        "headers": "depset of their headers",
        "data": "depset of the data files of those targets",
        "cc_info": "CcInfo of the target and its deps: defines and link flags",
    },
)

_SOURCE_EXTENSIONS = ["cc", "cu"]
_HEADER_EXTENSIONS = ["h", "cuh", "inc"]

# The rules whose files are compiled: C++ targets, and the nvcc rule of lmf_cuda_library (bazel/lmf.bzl),
# whose srcs are the .cu files. Other rules on the way (a protoc genrule, a filegroup) only lead further.
_COMPILED_KINDS = ["cc_library", "cc_binary", "cc_test", "_nvcc_compile"]

def _sources_aspect_impl(target, ctx):
    deps = getattr(ctx.rule.attr, "deps", []) + getattr(ctx.rule.attr, "srcs", [])
    infos = [d[EmulatedSourcesInfo] for d in deps if EmulatedSourcesInfo in d]
    own, headers, data = [], [], []
    # This workspace only: other repositories are system libraries, linked as they are.
    if ctx.rule.kind in _COMPILED_KINDS and not target.label.workspace_root:
        files = ctx.rule.files
        for f in getattr(files, "srcs", []) + getattr(files, "hdrs", []) + getattr(files, "textual_hdrs", []):
            if f.extension in _SOURCE_EXTENSIONS:
                own.append(f)
            elif f.extension in _HEADER_EXTENSIONS:
                headers.append(f)
        data = getattr(files, "data", [])
    # A cc_test's own CcInfo links nothing: its deps' do.
    cc_infos = [d[CcInfo] for d in [target] + deps if CcInfo in d]
    return [EmulatedSourcesInfo(
        own = own,
        sources = depset(own, transitive = [i.sources for i in infos]),
        headers = depset(headers, transitive = [i.headers for i in infos]),
        data = depset(data, transitive = [i.data for i in infos]),
        cc_info = cc_common.merge_cc_infos(cc_infos = cc_infos),
    )]

# Through `srcs` too: an lmf_cuda_library's cc_library lists its nvcc target there, whose srcs are the .cu.
_sources_aspect = aspect(
    implementation = _sources_aspect_impl,
    attr_aspects = ["deps", "srcs"],
)

def _emulation_setting_impl(ctx):
    return []

# The build setting of the configuration the emulation reads the graph in (//bazel:cuda_emulation).
emulation_setting = rule(
    implementation = _emulation_setting_impl,
    build_setting = config.bool(flag = False),
)

def _emulated_configuration_impl(settings, attr):
    return {"//bazel:cuda_emulation": True}

_emulated_configuration = transition(
    implementation = _emulated_configuration_impl,
    inputs = [],
    outputs = ["//bazel:cuda_emulation"],
)

def _manifest_lines(kind, files):
    return ["%s %s" % (kind, f.short_path) for f in files]

def _emulated_test_impl(ctx):
    if bool(ctx.attr.tests) == bool(ctx.attr.srcs):
        fail("%s: give exactly one of tests (GPU tests) and srcs (a check program)" % ctx.label)
    targets = ctx.attr.tests + ctx.attr.deps
    infos = [t[EmulatedSourcesInfo] for t in targets]

    # Each program: a GPU test's own sources, or the check program of srcs; every other source is linked
    # into each of them.
    if ctx.attr.tests:
        programs = [(t.label.name, t[EmulatedSourcesInfo].own) for t in ctx.attr.tests]
    else:
        programs = [(ctx.label.name, [f for f in ctx.files.srcs if f.extension in _SOURCE_EXTENSIONS])]
    program_files = [f for _, files in programs for f in files]
    program_paths = {f.short_path: True for f in program_files}
    all_sources = depset(transitive = [i.sources for i in infos]).to_list()
    sources = [f for f in all_sources if f.short_path not in program_paths]
    headers = depset(
        [f for f in ctx.files.srcs if f.extension in _HEADER_EXTENSIONS],
        transitive = [i.headers for i in infos],
    )
    cc_info = cc_common.merge_cc_infos(cc_infos = [i.cc_info for i in infos])

    # Link flags as Bazel links the real test, less the CUDA libraries the fakes replace.
    link_flags = []
    for linker_input in cc_info.linking_context.linker_inputs.to_list():
        if linker_input.owner.workspace_name != "cuda":
            link_flags.extend(linker_input.user_link_flags)

    lines = ["name %s" % ctx.label, "runtime %s" % ctx.attr.runtime]
    lines += ["define %s" % d for d in cc_info.compilation_context.defines.to_list()]
    lines += _manifest_lines("cuda", [f for f in sources if f.extension == "cu"])
    lines += _manifest_lines("host", [f for f in sources if f.extension != "cu"])
    lines += _manifest_lines("rewrite", [f for f in headers.to_list() if f.extension == "cuh"])
    lines += ["program %s %s" % (name, " ".join([f.short_path for f in files])) for name, files in programs]
    lines += ["link %s" % flag for flag in link_flags]
    lines += ["env %s=%s" % (k, v) for k, v in sorted(ctx.attr.emulation_env.items())]
    manifest = ctx.actions.declare_file(ctx.label.name + ".emulation")
    ctx.actions.write(manifest, "\n".join(lines) + "\n")

    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, "\n".join([
        "#!/usr/bin/env bash",
        "# %s: generated by lmf_emulated_test (kernels/cuda/emulation/emulation.bzl)." % ctx.label,
        "# Runs from its runfiles, where `bazel test` and `bazel run` start it.",
        'exec %s %s "$@"' % (ctx.file._driver.short_path, manifest.short_path),
        "",
    ]), is_executable = True)

    runfiles = ctx.runfiles(
        files = [manifest, ctx.file._driver] + sources + program_files + ctx.files.srcs + ctx.files._emulator,
        transitive_files = depset(transitive = [headers] + [i.data for i in infos]),
    )
    return [DefaultInfo(executable = script, runfiles = runfiles)]

_lmf_emulated_test = rule(
    implementation = _emulated_test_impl,
    test = True,
    attrs = {
        "tests": attr.label_list(
            cfg = _emulated_configuration,
            aspects = [_sources_aspect],
            doc = "GPU tests (cc_test), each built and run as its own program on the emulation",
        ),
        "srcs": attr.label_list(allow_files = [".cc", ".h"], doc = "one check program's own files"),
        "deps": attr.label_list(
            cfg = _emulated_configuration,
            aspects = [_sources_aspect],
            doc = "what the srcs use (cc targets)",
        ),
        "runtime": attr.string(
            default = "device",
            values = ["device", "host_memory"],
            doc = "device: the fake runtime and cuBLASLt of cublaslt/fake (device memory fenced off from " +
                  "the host, streams, events); host_memory: fake/cuda_runtime.h, for checks that hand the " +
                  "kernels host buffers",
        ),
        "emulation_env": attr.string_dict(doc = "environment of the programs (emulated_test.sh's `env` lines)"),
        "_driver": attr.label(
            default = "//kernels/cuda/emulation:emulated_test.sh",
            allow_single_file = True,
        ),
        "_emulator": attr.label(default = "//kernels/cuda/emulation:emulator"),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
)

def lmf_emulated_test(name, tests = [], srcs = [], deps = [], runtime = "device", emulation_env = {}, tags = [],
                      **kwargs):
    """Runs GPU tests (`tests`), or one check program (`srcs` using `deps`), on the CUDA emulation.

    It compiles two files at a time (tag cpu:2). Passes with a SKIPPED line where g++ is missing.
    `emulation_env`: environment of the programs, e.g. {"LMF_EMULATED_DEVICES": "4"} for a multi-process
    NCCL test (each process then has a device of its own).
    """
    _lmf_emulated_test(
        name = name,
        tests = tests,
        srcs = srcs,
        deps = deps,
        runtime = runtime,
        emulation_env = emulation_env,
        tags = tags + ["cpu:2"],
        **kwargs
    )

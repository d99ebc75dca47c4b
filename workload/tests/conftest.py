"""Env fixtures: the env `vramfit plan --class ...` prints for the InternVL3-8B example
(transformers runtime), one per GPU generation, plus a two-GPU Hopper plan."""

import pytest

A10G_INT8 = {
    "VRAMFIT_NODE_CLASS": "a10g-x1",
    "VRAMFIT_MODEL": "OpenGVLab/InternVL3-8B",
    "VRAMFIT_GPU_COUNT": "1",
    "VRAMFIT_DTYPE": "bfloat16",
    "VRAMFIT_QUANTIZATION": "int8",
    "VRAMFIT_FLASH_ATTENTION": "true",
    "VRAMFIT_MEMORY_FRACTION": "0.90",
    "VRAMFIT_CONTEXT_LENGTH": "4096",
    "VRAMFIT_USABLE_MEMORY_MIB": "18423",
    "TORCH_DTYPE": "bfloat16",
    "USE_QUANTIZATION": "true",
    "USE_FLASH_ATTN": "true",
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
    "PYTORCH_ALLOC_CONF": "max_split_size_mb:128",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
    "QUANTIZATION_BITS": "8",
    "MAX_TILES": "18",
    "VRAMFIT_MAX_TILES": "18",
}

T4_NF4 = A10G_INT8 | {
    "VRAMFIT_NODE_CLASS": "t4-x1",
    "VRAMFIT_DTYPE": "float16",
    "VRAMFIT_QUANTIZATION": "nf4",
    "VRAMFIT_FLASH_ATTENTION": "false",
    "VRAMFIT_USABLE_MEMORY_MIB": "12288",
    "TORCH_DTYPE": "float16",
    "USE_FLASH_ATTN": "false",
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64",
    "PYTORCH_ALLOC_CONF": "max_split_size_mb:64",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
    "QUANTIZATION_BITS": "4",
    "MAX_TILES": "14",
    "VRAMFIT_MAX_TILES": "14",
}

V100_FP16 = {
    key: value
    for key, value in (
        T4_NF4
        | {
            "VRAMFIT_NODE_CLASS": "v100-16gb-x4",
            "VRAMFIT_GPU_COUNT": "3",
            "VRAMFIT_QUANTIZATION": "none",
            "VRAMFIT_MEMORY_FRACTION": "0.80",
            "VRAMFIT_USABLE_MEMORY_MIB": "12120",
            "USE_QUANTIZATION": "false",
            "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:32",
            "PYTORCH_ALLOC_CONF": "max_split_size_mb:32",
        }
    ).items()
    if key != "QUANTIZATION_BITS"
}

H100_X2 = V100_FP16 | {
    "VRAMFIT_NODE_CLASS": "h100-80gb-x8",
    "VRAMFIT_GPU_COUNT": "2",
    "VRAMFIT_DTYPE": "bfloat16",
    "VRAMFIT_FLASH_ATTENTION": "true",
    "VRAMFIT_MEMORY_FRACTION": "0.95",
    "VRAMFIT_USABLE_MEMORY_MIB": "69326",
    "TORCH_DTYPE": "bfloat16",
    "USE_FLASH_ATTN": "true",
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256",
    "PYTORCH_ALLOC_CONF": "max_split_size_mb:256",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
    "MAX_TILES": "32",
    "VRAMFIT_MAX_TILES": "32",
}


@pytest.fixture
def a10g_env() -> dict[str, str]:
    return dict(A10G_INT8)

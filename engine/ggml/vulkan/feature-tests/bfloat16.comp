#version 460
// Compiles only where glslc knows GL_EXT_bfloat16 (ggml-vulkan's CMake asks).
#extension GL_EXT_bfloat16 : require
layout(local_size_x = 1) in;
void main() {}

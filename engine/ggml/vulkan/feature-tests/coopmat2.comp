#version 460
// Compiles only where glslc knows GL_NV_cooperative_matrix2 (ggml-vulkan's CMake asks).
#extension GL_NV_cooperative_matrix2 : require
layout(local_size_x = 1) in;
void main() {}

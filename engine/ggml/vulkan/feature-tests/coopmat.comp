#version 460
// Compiles only where glslc knows GL_KHR_cooperative_matrix (ggml-vulkan's CMake asks).
#extension GL_KHR_cooperative_matrix : require
layout(local_size_x = 1) in;
void main() {}

#pragma once
// Dense matrix types shared by every layer. Rows are tokens or queries, columns
// are the head dimension d, stored row-major so that one token's key is contiguous.
#include <Eigen/Dense>

namespace tierlab {

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixRMd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using VectorF = Eigen::VectorXf;
using VectorD = Eigen::VectorXd;

}  // namespace tierlab
